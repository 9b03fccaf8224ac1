"""The queues page (what each queue holds now, its settings and what they do, its
throughput over the last hour or day) and the model-limits page: the figures of
`noeta queue list` and `noeta limit list`, from the same store calls, kept fresh."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.core.errors import ConfigError
from noeta.core.ports.fleet_budgets import BUDGET_HEADINGS, budget_cells
from noeta.core.ports.model_limits import LIMIT_HEADINGS, limit_cells
from noeta.core.ports.queue_settings import QueueActivity, QueueOverview, queue_settings_store
from noeta.core.ports.store import check_key
from noeta.web.charts import PARTS, WINDOWS, depth_chart, throughput_chart
from noeta.web.queue_history import QueueHistory, unfinished_at_ends
from noeta.web.render import h, link, page, table, url, utc
from noeta.web.site import PageError, Site

REFRESH_SECONDS = 5  # live.js reads the page again this often and swaps its figures
_REFRESH = f' data-refresh="{REFRESH_SECONDS}"'
FILLING = (
    "the charts are being filled from the last day's tasks: they appear here on their own "
    "in a moment"
)
QUEUE_HEADINGS = (
    "queue",
    "claimable now",
    "running",
    "waiting for a slot",
    "scheduled later",
    "settings",
    "their effect",
)


async def queues_page(site: Site, request: Request, history: QueueHistory) -> HTMLResponse:
    window_name = request.query_params.get("range") or "hour"
    window = WINDOWS.get(window_name)
    if window is None:
        raise PageError(400, f"range must be hour or day, not {window_name!r}")
    named = request.query_params.get("queue") or ""
    try:
        names = [check_key("queue name", named)] if named else []
    except ConfigError as error:
        raise PageError(400, str(error)) from None
    store = await site.store()
    queues = queue_settings_store(store)
    now = await store.clock()
    overviews = await queues.queue_overview(names)
    counts: dict[str, list[QueueActivity]] = defaultdict(list)
    activity = await history.per_period(queues, now, window, names)
    for count in activity or []:
        counts[count.queue].append(count)
    shown = sorted({*(o.queue for o in overviews), *counts})
    if activity is None:  # the charts' first fill: what each queue holds now, no charts
        body = (
            table(QUEUE_HEADINGS, [_row(o) for o in overviews], css="queues") if overviews else ""
        )
        body += f'<p class="muted filling">{h(FILLING)}</p>'
    elif not shown:
        body = '<p class="muted">no queue has settings or tasks</p>'
    else:
        body = table(QUEUE_HEADINGS, [_row(o) for o in overviews], css="queues")
        body += _ranges(window.name, named)
        unfinished = {o.queue: o.unfinished for o in overviews}
        for queue in shown:
            ends = unfinished_at_ends(counts[queue], unfinished.get(queue, 0), window, now)
            body += throughput_chart(queue, counts[queue], window, now)
            body += depth_chart(queue, ends, window, now)
    note = (
        "Claimable now: due and not held. Waiting for a slot: claimable, but held back by "
        "a pause or by the concurrency (per-key and rate limits are not counted there). "
        "Scheduled later: due later, by a delay, a retry's backoff or a model limit's wait. "
        "The same figures as noeta queue list. Unfinished: ready, running, holding or "
        "waiting, counted back from now by the tasks created and finished since."
    )
    body = f'<div id="figures">{body}</div><p class="muted">{h(note)}</p>'
    title = f"Queue {named}" if named else "Queues"
    return HTMLResponse(page(title, body, status_line=_clock(now), live=_REFRESH))


def _row(o: QueueOverview) -> list[str]:
    settings = ", ".join(o.limits()) or "no limits"
    if o.changed_at is not None:
        settings += f" (set {utc(o.changed_at)})"
    keys = " ".join(f"{key}={n}" for key, n in o.running_by_key.items())
    effects = o.effects() + ([f"running by key: {keys}"] if keys else [])
    return [
        link(url("/queues", queue=o.queue), o.queue),
        link(url("/tasks", queue=o.queue, status="ready"), f"{o.claimable:,}"),
        link(url("/tasks", queue=o.queue, status="running"), f"{o.running:,}"),
        h(f"{o.waiting_for_slot:,}"),
        h(f"{o.scheduled:,}"),
        h(settings),
        "<br>".join(h(said) for said in effects) or '<span class="muted">none</span>',
    ]


def _ranges(current: str, queue: str) -> str:
    choices = []
    for name in WINDOWS:
        words = f"the last {name}"
        chosen = name == current
        where = url("/queues", queue=queue, range=name)
        choices.append(f"<b>{h(words)}</b>" if chosen else link(where, words))
    legend = "".join(f'<i class="{css}"></i>{h(word)} ' for _, css, word in PARTS)
    return (
        f'<h2>finished and unfinished tasks</h2><p class="ranges">{" · ".join(choices)}'
        f'<span class="legend">{legend}</span></p>'
    )


async def limits_page(site: Site, request: Request) -> HTMLResponse:
    store = await site.store()
    now = await store.clock()
    limiter = store.capabilities.model_limits
    if limiter is None:
        body = '<p class="muted">this store keeps no model limits</p>'
        return HTMLResponse(page("Model limits", body, status_line=_clock(now)))
    limits = await limiter.model_limits()
    if limits:
        rows = [[h(cell) for cell in limit_cells(each)] for each in limits]
        shown = table(LIMIT_HEADINGS, rows, css="limits")
    else:
        shown = '<p class="muted">no model limits: <code>noeta limit set</code> adds one</p>'
    note = (
        "Calls: model calls each limit let through. Waits: tasks handed back until its "
        "budget allowed their call, and how long they waited in all. 429s: the provider's "
        "refusals under it; a Retry-After pauses the limit for every worker until then. "
        "The same figures as noeta limit list."
    )
    budgets = await limiter.fleet_budgets()
    if budgets:
        cells = [[h(cell) for cell in budget_cells(each, now)] for each in budgets]
        spending = table(BUDGET_HEADINGS, cells, css="limits")
    else:
        spending = '<p class="muted">no fleet budgets: <code>noeta budget set</code> adds one</p>'
    about = (
        "What each queue, or one concurrency key of it, may spend on model calls per "
        "calendar hour, day or month (UTC), what the current period has spent, the calls "
        "it let through and those it refused (not sent). The same as noeta budget list."
    )
    body = (
        f'<div id="figures">{shown}<h2>fleet budgets</h2>{spending}</div>'
        f'<p class="muted">{h(note)}</p><p class="muted">{h(about)}</p>'
    )
    return HTMLResponse(page("Model limits", body, status_line=_clock(now), live=_REFRESH))


def _clock(now: datetime) -> str:
    return h(f"store clock {utc(now)}")
