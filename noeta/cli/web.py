"""`noeta web`: serve the operator's pages (tasks, a task's live timeline, workers, cron)
behind a token: NOETA_WEB_TOKEN, or one drawn at start and printed once in a login link
(loopback only). Starlette and uvicorn (the `web` extra) are imported only when it runs."""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

import click

from noeta.cli.health_options import health_options, prepare_health, run_check
from noeta.cli.options import check_store_url, store_option
from noeta.core.errors import ConfigError

if TYPE_CHECKING:
    from noeta.health.process import ProcessHealth
    from noeta.scheduler.cronfile import Schedule

DEFAULT_BIND = "127.0.0.1:8787"
JAEGER_ENV = "NOETA_JAEGER_URL"
DEFAULT_MAX_STREAMS = 200  # the same as noeta.web.site's, which this must not import
REPLICA_ENV = "NOETA_WEB_REPLICA"


def _replica_url(ctx: click.Context, param: click.Parameter, url: str | None) -> str | None:
    """A PostgreSQL URL, or a usage error (exit 2): a replica is PostgreSQL's."""
    if not url:
        return None
    from noeta.backends.stores import store_kind

    try:
        kind = store_kind(url)
    except ConfigError as error:
        raise click.BadParameter(f"not a PostgreSQL URL ({error})") from None
    if kind != "postgres":
        raise click.BadParameter("not a PostgreSQL URL: a read replica is a PostgreSQL standby")
    from noeta.backends.stores.urls import holds_password, masked

    source = ctx.get_parameter_source(param.name or "replica")
    if source is click.core.ParameterSource.COMMANDLINE and holds_password(url):
        click.echo(
            f"noeta: warning: --replica {masked(url)} puts a password on the command line, "
            f"where every process on this machine can read it; give it in {REPLICA_ENV}, "
            "or leave it out of the URL and set PGPASSFILE",
            err=True,
        )
    return url


@click.command()
@click.option(
    "--bind",
    default=DEFAULT_BIND,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to listen (port 0: any free one). A non-loopback host needs NOETA_WEB_TOKEN.",
)
@click.option(
    "--max-streams",
    default=DEFAULT_MAX_STREAMS,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Live pages open at once; more are answered with 503 (one log line per burst).",
)
@click.option(
    "--cron",
    "cron_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Cron files whose schedules the cron page shows with their next fires (repeatable).",
)
@click.option(
    "--replica",
    envvar=REPLICA_ENV,
    default=None,
    metavar="URL",
    callback=_replica_url,
    help=(
        "A streaming replica's postgresql:// URL: every page reads from it (its lag on "
        "each page); actions and the live feed's LISTEN stay on the primary (--store)."
    ),
)
@store_option
@health_options
def web(
    bind: str,
    max_streams: int,
    cron_files: tuple[str, ...],
    replica: str | None,
    store: str | None,
    health: str | None,
    stuck_after: float,
    check: bool,
) -> None:
    """Watch and steer tasks in a browser: the task list, each task's log as a live
    timeline (takeovers and recoveries marked), workers and cron; cancel a task, send a
    message, answer a gate.

    Every page needs the token: NOETA_WEB_TOKEN if set, else one drawn at start and
    printed once in a login link (open it in the browser). Scripts may send it as
    `Authorization: Bearer TOKEN`."""
    from noeta.cli.nondumpable import make_non_dumpable
    from noeta.web.security import TOKEN_ENV, check_token_rule, parse_bind

    # Its environment and memory hold the token: a same-user process (a task's command)
    # must not read them through /proc.
    make_non_dumpable()
    where = parse_bind(bind)
    token = os.environ.get(TOKEN_ENV) or None
    check_token_rule(where, token)
    check_store_url(store)
    if replica is not None:
        from noeta.backends.stores import resolve_url, store_kind

        resolved = resolve_url(store)
        if resolved is not None and store_kind(resolved) != "postgres":
            raise ConfigError("--replica needs a PostgreSQL store (--store): it is its replica")
    if check:
        run_check(health, store)
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ConfigError("noeta web needs the web extra: pip install 'noeta[web]'") from None
    from noeta.scheduler.cronfile import load_cron_files

    schedules = load_cron_files(cron_files) if cron_files else []
    listening = _listen(where.host, where.port)
    serving = prepare_health(health, store, stuck_after)
    if serving.listening is not None:
        from noeta import observability
        from noeta.backends.stores import resolve_url

        observability.start("noeta-web", secrets=[resolve_url(store)], scraped=True)
    settings = _Settings(token, schedules, where.loopback, where.host, max_streams, replica)
    asyncio.run(_serve(listening, store, settings, serving))


@dataclass(frozen=True)
class _Settings:
    token: str | None  # NOETA_WEB_TOKEN; None: draw one and print it in the login link
    schedules: list[Schedule]
    loopback: bool
    host: str
    max_streams: int
    replica: str | None  # --replica: the pages' reads go there


def _password_of(url: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(url).get("password") or "")


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, made here so a taken address is one clear line, not a log."""
    from noeta.health.server import ListenAddress, listen

    return listen(ListenAddress(host, port), option="")


async def _serve(
    listening: socket.socket, url: str | None, settings: _Settings, health: ProcessHealth
) -> None:
    import uvicorn

    class _Server(uvicorn.Server):
        """Ends the live streams as soon as a stop is asked: uvicorn waits for open
        connections before it stops, and a stream would otherwise never close."""

        def __init__(self, config: uvicorn.Config, feed: LiveFeed) -> None:
            super().__init__(config)
            self.feed = feed

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            health.readiness.drain()
            self.feed.stop_streams()
            super().handle_exit(sig, frame)

    from noeta.backends.stores import resolve_url, store_kind
    from noeta.client import AsyncClient
    from noeta.web.app import create_app
    from noeta.web.live import LiveFeed
    from noeta.web.render import forget_secret
    from noeta.web.replica import ReadReplica
    from noeta.web.security import TOKEN_ENV, new_token
    from noeta.web.site import Site

    client = AsyncClient(url, application_name="noeta-web")
    await client.store()  # a store that cannot be opened is one line, before serving
    replica = None
    if settings.replica is not None:
        forget_secret(_password_of(settings.replica))
        replica = ReadReplica(settings.replica)
        try:
            lag = await replica.open()  # unreachable, or a primary: one line, before serving
        except BaseException:
            await replica.close()
            await client.close()
            raise
        click.echo(f"noeta web: pages read from the {lag.line()}")
    loopback = settings.loopback
    hosts = ("127.0.0.1", "localhost", "::1", settings.host.lower()) if loopback else ()
    site = Site(
        client,
        token=settings.token or new_token(),
        schedules=settings.schedules,
        jaeger_url=os.environ.get(JAEGER_ENV) or None,
        allowed_hosts=hosts,
        secure_cookie=not loopback,  # off loopback, serve it behind HTTPS
        max_streams=settings.max_streams,
        replica=replica,
    )
    feed = LiveFeed(site)
    app = create_app(site, feed)
    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on", access_log=False
    )
    address = listening.getsockname()
    shown = f"[{address[0]}]:{address[1]}" if ":" in address[0] else f"{address[0]}:{address[1]}"
    resolved = resolve_url(url)
    kind = store_kind(resolved) if resolved else "embedded postgres"
    click.echo(f"noeta web: serving http://{shown}/ on the {kind} store (Ctrl-C stops)")
    if settings.token is None:  # drawn here: this link is the only place it is shown
        click.echo(f"noeta web: open http://{shown}/login?token={site.token}")
    else:
        click.echo(f"noeta web: log in at http://{shown}/login with {TOKEN_ENV}")
    health.start()
    if health.address:
        click.echo(f"noeta web: health: serving /livez, /readyz and /metrics on {health.address}")
    try:
        await _Server(config, feed).serve(sockets=[listening])
    finally:
        await health.close()
