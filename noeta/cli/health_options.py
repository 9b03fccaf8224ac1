"""`--health HOST:PORT`, `--health-stuck-after` and `--check`, shared by `noeta worker`,
`noeta scheduler` and `noeta web`; `--check` itself (for systemd's ExecStartPre and
container health commands): one line, exit 0 or 1."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from noeta.health.process import ProcessHealth

F = TypeVar("F", bound=Callable[..., Any])
CHECK_SECONDS = 5.0  # a health endpoint's answer, for --check


def health_options(function: F) -> F:
    function = click.option(
        "--health",
        "health",
        default=None,
        metavar="HOST:PORT",
        help="Serve GET /livez, /readyz and /metrics (Prometheus) here; a bare PORT or"
        " :PORT listens on 127.0.0.1. Off when absent.",
    )(function)
    function = click.option(
        "--health-stuck-after",
        "stuck_after",
        type=click.FloatRange(0.1, 3600),
        default=60.0,
        show_default=True,
        metavar="SECONDS",
        help="/livez fails once a loop is this late for its next turn.",
    )(function)
    return click.option(
        "--check",
        is_flag=True,
        help="Check and exit 0 (ready) or 1 (one line why): with --health, ask the running"
        " process's /livez and /readyz; without, whether the store answers and its schema"
        " is current.",
    )(function)


def prepare_health(address: str | None, store: str | None, stuck_after: float) -> ProcessHealth:
    """Before anything starts: a bad or taken address is one line and exit 1."""
    from noeta.health.process import ProcessHealth
    from noeta.health.server import listen, parse_address

    listening = None if address is None else listen(parse_address(address))
    return ProcessHealth(listening, store, stuck_after)


def run_check(address: str | None, store: str | None) -> NoReturn:
    """`--check`: print one line and exit 0 if ready, 1 if not."""
    if address is None:
        from noeta.health.readiness import Readiness, store_check

        reasons = Readiness(store_check(store)).reasons()
        why = [f"not ready: {'; '.join(reasons)}"] if reasons else []
        _say_and_exit(why, "ready: the store answers and its schema is current")
    from noeta.health.server import parse_address

    where = parse_address(address)
    for path in ("/livez", "/readyz"):
        try:
            status, body = _get(where.reachable_host, where.port, path)
        except OSError as error:
            _say_and_exit([f"no answer at {where}{path}: {error.strerror or error}"], "")
        if status != 200:
            _say_and_exit([_why(path, body)], "")
    _say_and_exit([], f"ready: {where} is live and ready")


def _get(host: str, port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(host, port, timeout=CHECK_SECONDS)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read(65536)
    except TimeoutError:
        raise OSError(0, f"no answer within {CHECK_SECONDS:g} s") from None
    except http.client.HTTPException as error:
        raise OSError(0, f"not a health endpoint ({type(error).__name__})") from None
    finally:
        connection.close()


def _why(path: str, body: bytes) -> str:
    try:
        answer = json.loads(body)
    except ValueError:
        return f"{path} failed"
    if path == "/livez":
        return f"not live: stuck: {', '.join(answer.get('stuck', [])) or '?'}"
    return f"not ready: {'; '.join(answer.get('reasons', [])) or '?'}"


def _say_and_exit(reasons: list[str], ready: str) -> NoReturn:
    if reasons:
        click.echo(f"noeta: {' '.join('; '.join(reasons).split())}", err=True)
        sys.exit(1)
    click.echo(ready)
    sys.exit(0)
