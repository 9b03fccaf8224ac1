"""What every page of `noeta web` shares: the client and its store's views, the CSRF
tokens, the settings the command was started with, and the pages that say no (404, 400,
403, 409) in words instead of a traceback."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.responses import HTMLResponse

from noeta.client import AsyncClient
from noeta.core.errors import ConfigError
from noeta.core.store import Store
from noeta.core.store_views import StoreViews
from noeta.scheduler.cronfile import Schedule
from noeta.web.render import h, link, page
from noeta.web.security import CsrfTokens


@dataclass
class Site:
    """The state of one `noeta web` process."""

    client: AsyncClient
    token: str | None = None
    schedules: list[Schedule] = field(default_factory=list)
    jaeger_url: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    csrf: CsrfTokens = field(default_factory=CsrfTokens)

    async def store(self) -> Store:
        return await self.client.store()

    async def views(self) -> StoreViews:
        store = await self.client.store()
        if not isinstance(store, StoreViews):
            raise ConfigError("this store offers no views for noeta web")
        return store


class PageError(HTTPException):
    """A request the site refuses, with the sentence its page says."""

    def __init__(self, status_code: int, message: str, title: str = "") -> None:
        super().__init__(status_code, message)
        self.title = title or {
            400: "Bad request",
            401: "Token needed",
            403: "Refused",
            404: "Not found",
            409: "Not done",
        }.get(status_code, "Error")


def not_found(what: str) -> PageError:
    return PageError(404, f"there is no {what}")


def error_page(status_code: int, title: str, message: str) -> HTMLResponse:
    body = f'<p class="notice bad">{h(message)}</p><p>{link("/tasks", "back to the tasks")}</p>'
    return HTMLResponse(page(title, body), status_code=status_code)
