"""The `noeta web` application: its routes behind the gate (`gate.py`: host, session),
and the error pages (a refused request is a page that says why, never a traceback)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from noeta.core.errors import NoetaError, StoreError
from noeta.web import (
    actions,
    bulk_pages,
    cost_pages,
    failure_pages,
    live,
    ops_pages,
    queue_pages,
    task_list,
    task_page,
)
from noeta.web.cost_history import CostHistory
from noeta.web.gate import Gate
from noeta.web.queue_history import QueueHistory
from noeta.web.render import forget_secret, scrubbed
from noeta.web.site import PageError, Site, error_page

log = logging.getLogger("noeta.web")
Handler = Callable[[Site, Request], Awaitable[Response]]


def create_app(site: Site, feed: live.LiveFeed | None = None) -> Starlette:
    """The app on `site`'s client; it closes the client when it stops."""
    feed = feed or live.LiveFeed(site)
    forget_secret(site.token)

    def route(path: str, handler: Handler, methods: tuple[str, ...] = ("GET",)) -> Route:
        async def endpoint(request: Request) -> Response:
            if "GET" in methods:  # a page: read from the replica, if any, and say its lag
                await site.note_replica()
            return await handler(site, request)

        return Route(path, endpoint, methods=list(methods))

    async def follow(site: Site, request: Request) -> Response:
        return await live.follow(site, feed, request)

    history = QueueHistory()  # the queues page's per-minute counts, kept here

    async def queues(site: Site, request: Request) -> Response:
        return await queue_pages.queues_page(site, request, history)

    costs = CostHistory()  # the cost page's rollup per day, queue, key and model, kept here

    async def cost(site: Site, request: Request) -> Response:
        return await cost_pages.cost_page(site, request, costs)

    async def home(site: Site, request: Request) -> Response:
        return RedirectResponse("/tasks", status_code=303)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await feed.close()
            await site.search_index.close()
            await site.bulk_runs.close()
            await history.close()
            await costs.close()
            await site.client.close()
            if site.replica is not None:
                await site.replica.close()

    static = resources.files("noeta.web").joinpath("static")
    app = Starlette(
        routes=[
            route("/", home),
            route("/tasks", task_list.tasks_page),
            route("/tasks/{task_id}", task_page.task_page),
            route("/tasks/{task_id}/events/{seq}", task_page.event_raw),
            route("/tasks/{task_id}/live", follow),
            route("/tasks/{task_id}/cancel", actions.cancel, ("POST",)),
            route("/tasks/{task_id}/send", actions.send, ("POST",)),
            route("/tasks/{task_id}/answer", actions.answer, ("POST",)),
            route("/tasks/{task_id}/fork", actions.fork, ("POST",)),
            # Not under /tasks/: "bulk" may be a task's id.
            route("/bulk/{action}", bulk_pages.confirm),
            route("/bulk/{action}", bulk_pages.act, ("POST",)),
            route("/bulk/runs/{run}", bulk_pages.run_page),
            route("/bulk/runs/{run}/stop", bulk_pages.stop, ("POST",)),
            route("/failures", failure_pages.failures_page),
            route("/workers", ops_pages.workers_page),
            route("/cron", ops_pages.cron_page),
            route("/queues", queues),
            route("/limits", queue_pages.limits_page),
            route("/cost", cost),
            Mount("/static", StaticFiles(directory=str(static)), name="static"),
        ],
        exception_handlers={
            HTTPException: _http_error,
            NoetaError: _noeta_error,
            Exception: _unexpected,
        },
        lifespan=lifespan,
    )
    app.add_middleware(Gate, site=site)
    return app


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    title = (
        error.title
        if isinstance(error, PageError)
        else {404: "Not found"}.get(error.status_code, "Refused")
    )
    return error_page(error.status_code, title, str(error.detail))


async def _noeta_error(request: Request, error: Exception) -> Response:
    status = 503 if isinstance(error, StoreError) else 400
    return error_page(status, "Store error" if status == 503 else "Refused", scrubbed(str(error)))


async def _unexpected(request: Request, error: Exception) -> Response:
    log.error(
        "noeta web: %s on %s: %s", type(error).__name__, request.url.path, scrubbed(str(error))
    )
    return error_page(500, "Error", f"unexpected {type(error).__name__} (a bug in noeta web)")
