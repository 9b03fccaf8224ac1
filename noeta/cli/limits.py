"""`noeta limit`: the shared model-call limits every worker counts against (ADR-0075):
set, list with what each has counted, clear."""

from __future__ import annotations

import asyncio
import json

import click

from noeta.cli.limiter import echo_table, open_limiter
from noeta.cli.options import json_option, store_option
from noeta.core.errors import ConfigError
from noeta.core.ports.model_limits import (
    LIMIT_HEADINGS,
    ModelLimit,
    check_limit,
    limit_cells,
)

_key = click.argument("key", metavar="PROVIDER[/MODEL]")


@click.group(name="limit")
def limit() -> None:
    """Shared model-call limits: requests and tokens per minute, for every worker at once."""


@limit.command(name="set")
@_key
@click.option("--rpm", type=int, default=None, help="Model calls per minute (1 or more).")
@click.option("--tpm", type=int, default=None, help="Tokens per minute, in and out (1 or more).")
@store_option
def set_limit(key: str, rpm: int | None, tpm: int | None, store: str | None) -> None:
    """Limit calls to PROVIDER/MODEL (or every model of PROVIDER: PROVIDER or PROVIDER/*).

    Calls are spread evenly: --rpm 600 lets one call through every 100 ms. A task whose
    call the budget does not allow waits, handed back, until it does."""
    key, rpm, tpm = _checked(key, rpm, tpm)
    asyncio.run(_set(store, key, rpm, tpm))
    rates = ", ".join(f"{n:,} {name}" for n, name in ((rpm, "rpm"), (tpm, "tpm")) if n)
    click.echo(f"{key}: {rates}")


@limit.command(name="clear")
@_key
@store_option
def clear_limit(key: str, store: str | None) -> None:
    """Remove the limit of PROVIDER/MODEL (calls under it are no longer counted)."""
    key = _checked(key, None, 1)[0]
    if not asyncio.run(_clear(store, key)):
        raise ConfigError(f"no limit {key} to clear")
    click.echo(f"{key}: cleared")


@limit.command(name="list")
@json_option
@store_option
def list_limits(as_json: bool, store: str | None) -> None:
    """Every limit, with the calls it let through, the tasks it handed back and their
    waits, and the 429s the provider answered under it."""
    limits = asyncio.run(_list(store))
    if as_json:
        click.echo(json.dumps([_document(each) for each in limits], indent=2))
        return
    if not limits:
        click.echo("no model limits")
        return
    echo_table([LIMIT_HEADINGS, *(limit_cells(each) for each in limits)])


def _checked(key: str, rpm: int | None, tpm: int | None) -> tuple[str, int | None, int | None]:
    """Checked before the store is opened: a bad limit changes nothing."""
    from noeta.backends.models.registry import KNOWN

    key, rpm, tpm = check_limit(key, rpm, tpm)
    provider = key.split("/", 1)[0]
    if provider not in KNOWN:
        raise ConfigError(f"unknown provider {provider!r}: use one of {', '.join(KNOWN)}")
    return key, rpm, tpm


def _document(each: ModelLimit) -> dict[str, object]:
    return {
        "limit": each.key,
        "rpm": each.rpm,
        "tpm": each.tpm,
        "calls": each.calls,
        "handbacks": each.handbacks,
        "waited_seconds": each.waited_seconds,
        "throttled": each.throttled,
        "paused_until": each.paused_until.isoformat() if each.paused_until else None,
    }


async def _set(url: str | None, key: str, rpm: int | None, tpm: int | None) -> None:
    store, limiter = await open_limiter(url)
    try:
        await limiter.set_model_limit(key, rpm, tpm)
    finally:
        await store.close()


async def _clear(url: str | None, key: str) -> bool:
    store, limiter = await open_limiter(url)
    try:
        return await limiter.clear_model_limit(key)
    finally:
        await store.close()


async def _list(url: str | None) -> list[ModelLimit]:
    store, limiter = await open_limiter(url, reads_only=True)
    try:
        return await limiter.model_limits()
    finally:
        await store.close()
