"""What every page of `noeta web` shares: the client (and, with --replica, a second one
its pages read from) and its store's views, the token, sessions and CSRF tokens, the
settings the command was started with, and the pages that say no in words."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.client import AsyncClient
from noeta.core.errors import ConfigError
from noeta.core.ports.store import Store
from noeta.core.ports.store_views import StoreViews
from noeta.scheduler.cronfile import Schedule
from noeta.web.bulk_runs import BulkRuns
from noeta.web.render import h, link, page, status_note
from noeta.web.replica import ReadReplica
from noeta.web.search_index import SearchIndex
from noeta.web.security import CsrfTokens, Sessions, new_token

# How many live pages (server-sent event streams) one server keeps open at once.
DEFAULT_MAX_STREAMS = 200


@dataclass
class Site:
    """The state of one `noeta web` process."""

    client: AsyncClient  # the primary's: every action, and the live feed's LISTEN
    # Every request needs it (or a session made from it): NOETA_WEB_TOKEN, or drawn at start.
    token: str = field(default_factory=new_token)
    schedules: list[Schedule] = field(default_factory=list)
    jaeger_url: str | None = None
    # On loopback, the Host names this server may be called by; empty: any (off loopback).
    allowed_hosts: tuple[str, ...] = ()
    csrf: CsrfTokens = field(default_factory=CsrfTokens)
    secure_cookie: bool = False  # off loopback the session cookie travels over HTTPS only
    max_streams: int = DEFAULT_MAX_STREAMS
    search_index: SearchIndex = field(default_factory=SearchIndex)
    bulk_runs: BulkRuns = field(default_factory=BulkRuns)  # bulk actions in the background
    # --replica: what the pages read through (a streaming standby) and how far behind it is.
    replica: ReadReplica | None = None
    sessions: Sessions = field(init=False)

    def __post_init__(self) -> None:
        self.sessions = Sessions(self.token)

    @property
    def reader(self) -> AsyncClient:
        """The client the pages read through: the replica's if there is one."""
        return self.client if self.replica is None else self.replica.client

    async def store(self) -> Store:
        """The store the pages read (the replica's, with --replica): never write to it."""
        return await self.reader.store()

    async def primary_store(self) -> Store:
        """The primary's store: for what a standby cannot do (LISTEN, any write)."""
        return await self.client.store()

    async def note_replica(self) -> None:
        """Before a page is read: the replica's lag for its status line, or ReplicaAway
        (a 503 page saying so) if it does not answer. Never a silent read of the primary
        instead: the replica is there to keep the pages' load off it (docs/web.md)."""
        if self.replica is not None:
            status_note.set((await self.replica.state()).line())

    async def views(self, *, primary: bool = False) -> StoreViews:
        """The pages' views (the replica's); `primary`: the primary's, for what writes."""
        store = await (self.primary_store() if primary else self.store())
        views = store.capabilities.views
        if views is None:
            raise ConfigError("this store offers no views for noeta web")
        return views


def whole_number(text: str | None) -> int | None:
    """`text` as a whole number of 0 or more (ASCII digits only: `"²".isdigit()` is true,
    yet `int("²")` fails), or None."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)


def session_of(request: Request) -> str:
    """The session the gate let `request` in under (its forms' CSRF tokens name it)."""
    session: str = request.state.session
    return session


class PageError(HTTPException):
    """A request the site refuses, with the sentence its page says."""

    def __init__(self, status_code: int, message: str, title: str = "") -> None:
        super().__init__(status_code, message)
        self.title = title or {
            400: "Bad request",
            401: "Token needed",
            503: "Busy",
            403: "Refused",
            404: "Not found",
            409: "Not done",
        }.get(status_code, "Error")


def not_found(what: str) -> PageError:
    return PageError(404, f"there is no {what}")


def error_page(status_code: int, title: str, message: str) -> HTMLResponse:
    body = f'<p class="notice bad">{h(message)}</p><p>{link("/tasks", "back to the tasks")}</p>'
    return HTMLResponse(page(title, body), status_code=status_code)
