"""What `noeta limit` and `noeta budget` share: the store's limiter (limits and fleet
budgets, ADR-0075, ADR-0110) opened for a command, and their tables printed."""

from __future__ import annotations

import click

from noeta.core.errors import ConfigError
from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.store import Store


async def open_limiter(
    url: str | None, *, reads_only: bool = False, what: str = "limit"
) -> tuple[Store, ModelLimiter]:
    """The store and its limits (and fleet budgets); ConfigError if it keeps none."""
    from noeta.backends.stores import open_store

    name = f"noeta-{what}"
    store = await open_store(url, application_name=name, start_embedded=not reads_only)
    limiter = store.capabilities.model_limits
    if limiter is None:
        await store.close()
        raise ConfigError(f"this store keeps no model limits or budgets ({name})")
    return store, limiter


def echo_table(rows: list[tuple[str, ...]]) -> None:
    """Rows of cells in columns as wide as their widest cell (`noeta limit/budget list`)."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = zip(row, widths, strict=True)
        click.echo("  ".join(cell.ljust(width) for cell, width in cells).rstrip())
