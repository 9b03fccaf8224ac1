"""What each command reads from the environment, for its --help, and `noeta --version`
(the version, the store in use with its password masked, and its schema version)."""

from __future__ import annotations

import click

STORE = ("NOETA_STORE", "the store URL when --store is not given")
SESSION = ("NOETA_STORE_SESSION", "PostgreSQL's own URL when the store's is a pooler's")
HOME = ("NOETA_HOME", "the embedded PostgreSQL's folder (default ~/.local/share/noeta)")
CONFIG = ("NOETA_CONFIG", "the config file when --config is not given")
MODEL = ("NOETA_MODEL", "the model spec when --model is not given")
PASSWORD = ("PGPASSWORD", "the password when the store URL has none; also PGPASSFILE")
KEYS = ("ANTHROPIC_API_KEY", "the providers' keys and addresses: also OPENAI_API_KEY,")
ADDRESSES = ("", "ANTHROPIC_BASE_URL, OPENAI_BASE_URL")
FAILPOINTS = ("NOETA_FAILPOINTS", "points where the process dies or freezes (tests)")
OTEL = ("OTEL_*", "OpenTelemetry export: OTEL_EXPORTER_OTLP_ENDPOINT, …")
JOURNAL = ("NOETA_APPEND_JOURNAL", "a file to journal acknowledged appends to (make cluster)")
WEB_TOKEN = ("NOETA_WEB_TOKEN", "the token every request needs (unset: drawn, in a login link)")
WEB_REPLICA = ("NOETA_WEB_REPLICA", "a streaming replica the pages read from (--replica)")
JAEGER = ("NOETA_JAEGER_URL", "Jaeger's address: a task's page links to its trace")
LOG_LEVEL = ("NOETA_LOG_LEVEL", "the log level when --log-level is not given")
TRACEBACK = ("NOETA_TRACEBACK", "set: an unexpected error shows its traceback")

# Beyond what a command's options say it reads (--store, --config, --model): the
# processes that run tasks read the keys, the failpoints and the OTEL_* variables.
_RUNS_TASKS = (KEYS, ADDRESSES, FAILPOINTS, OTEL)
_EXTRA: dict[str, tuple[tuple[str, str], ...]] = {
    "noeta run": _RUNS_TASKS,
    "noeta worker": (*_RUNS_TASKS, JOURNAL, LOG_LEVEL),
    "noeta scheduler": (LOG_LEVEL,),
    "noeta db status": (HOME,),
    "noeta db start": (HOME,),
    "noeta db stop": (HOME,),
    "noeta web": (WEB_TOKEN, WEB_REPLICA, JAEGER),
}


def describe_environment(command: click.Command, path: str) -> None:
    """Give `command` (and each subcommand) an epilog listing the variables it reads."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            describe_environment(sub, f"{path} {name}")
    names = {option.name for option in command.params}
    read: list[tuple[str, str]] = []
    if "store" in names:
        read += [STORE, HOME]
    if "config" in names:
        read.append(CONFIG)
    if "model" in names:
        read.append(MODEL)
    if "store" in names:
        read += [PASSWORD, SESSION]
    read += [item for item in _EXTRA.get(path, ()) if item not in read]
    if path == "noeta":
        read = [STORE, HOME, CONFIG, MODEL, SESSION, *_RUNS_TASKS]
    read.append(TRACEBACK)
    width = max(len(name) for name, _ in read)
    lines = [f"  {name.ljust(width)}  {meaning}" for name, meaning in read]
    command.epilog = "\b\nEnvironment:\n" + "\n".join(lines)


def show_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    """--version: what runs, against which store, at which schema."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from noeta.backends.stores import resolve_url
    from noeta.backends.stores.migrations import load_migrations
    from noeta.backends.stores.urls import masked

    url = resolve_url(ctx.params.get("store"))
    shipped = load_migrations("postgres")[-1].version
    click.echo(f"noeta {version('noeta')}")
    click.echo(f"store: {masked(url) if url else _embedded_place()}")
    click.echo(f"schema: {shipped} (this noeta's); the store's: {_store_schema(url, shipped)}")
    ctx.exit()


def _embedded_place() -> str:
    from noeta.backends.stores.embedded_home import default_home

    return f"the embedded PostgreSQL in {default_home()}"


def _store_schema(url: str | None, shipped: int) -> str:
    """The store's schema as opening it finds it: current, or why not (in one line)."""
    from noeta.core.errors import NoetaError

    if url is None:
        from noeta.backends.stores.embedded import EmbeddedPostgres
        from noeta.backends.stores.embedded_home import default_home

        url = EmbeddedPostgres(default_home()).running_dsn()
        if url is None:
            return "unknown (the embedded server is not running: `noeta db start`)"
    import asyncio
    from pathlib import Path

    from noeta.backends.stores import sqlite_path, store_kind

    try:
        if store_kind(url) == "sqlite" and not Path(sqlite_path(url)).exists():
            return "none yet (the sqlite file does not exist)"
        asyncio.run(asyncio.wait_for(_open_and_close(url), timeout=5))
    except NoetaError as error:
        return f"unknown ({error})"
    except TimeoutError:
        return "unknown (the store did not answer within 5 s)"
    return f"{shipped} (current)"


async def _open_and_close(url: str) -> None:
    from noeta.backends.stores import open_store

    store = await open_store(url, application_name="noeta-version", max_connections=1)
    await store.close()
