"""The operator's other pages: workers (the registry's, live and recently departed, and
who holds which task, at which epoch, until when; read again every few seconds) and cron
(each schedule's next fires in UTC and in its zone, and what its latest slots did)."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.client.fleet import Fleet, FleetWorker, read_fleet, seen_ago
from noeta.core.ports.store import CronFireRecord
from noeta.core.ports.store_views import MAX_PAGE, HeldClaim
from noeta.scheduler.slots import next_slot, zone
from noeta.web.queue_pages import REFRESH_SECONDS
from noeta.web.render import h, link, page, status_badge, table, url, utc
from noeta.web.site import Site

LIVE = f' data-refresh="{REFRESH_SECONDS}"'
HISTORY_ROWS = 10
NEXT_FIRES = 3
WORKER_HEADINGS = [
    "worker",
    "state",
    "host",
    "pid",
    "version",
    "queues",
    "offers",
    "concurrency",
    "held",
    "processed",
    "failed",
    "started",
    "last seen",
]
HELD_SHOWN = 20  # of each holder's claims on the page
DEPARTED_NOTE = (
    "dead: silent past its lease (killed, frozen, cut off from the store); it is live again "
    "at its next round, if it has one. stopped: it stopped and said so. Both are deleted "
    "by the other workers' rounds an hour after."
)
UNLISTED_NOTE = (
    "a noeta older than the registry, a `noeta run`, or a worker that died over an hour ago"
)
LEASE_NOTE = (
    "A worker renews all its leases in one statement each round and records itself every "
    "third of its lease. A lapsed lease is one the next claimer may take over."
)


async def workers_page(site: Site, request: Request) -> HTMLResponse:
    """The registry's workers (ADR-0100), idle ones too, each with what it holds; the dead
    and stopped of the last hour; and any holder the registry does not list."""
    fleet = await read_fleet(await site.store(), departed=True)
    live = [each for each in fleet.workers if each.worker.state == "live"]
    departed = [each for each in fleet.workers if each.worker.state != "live"]
    parts = [f"<h2>Live workers ({len(live)})</h2>"]
    if live:
        parts.append(table(WORKER_HEADINGS, [_worker_row(each, fleet) for each in live]))
    else:
        parts.append(
            '<p class="muted">no worker is live: start one with <code>noeta worker</code></p>'
        )
    if departed:
        parts.append(f"<h2>Dead or stopped in the last hour ({len(departed)})</h2>")
        parts.append(table(WORKER_HEADINGS, [_worker_row(each, fleet) for each in departed]))
        parts.append(f'<p class="muted">{h(DEPARTED_NOTE)}</p>')
    for each in fleet.workers:
        if each.held:
            parts.append(f"<h2>{h(each.worker.id)} holds ({len(each.held)})</h2>")
            parts.append(_held(each.held, fleet.clock))
    for owner, held in fleet.unlisted.items():
        parts.append(f"<h2>{h(owner)} holds ({len(held)})</h2>")
        parts.append(f'<p class="muted">{h(owner)} is not in the registry: {h(UNLISTED_NOTE)}</p>')
        parts.append(_held(held, fleet.clock))
    if fleet.held_capped:
        parts.append(f'<p class="muted">the first {MAX_PAGE} held tasks are shown</p>')
    parts.append(f'<p class="muted">{h(LEASE_NOTE)}</p>')
    status = h(f"store clock {utc(fleet.clock)}")
    # live.js reads the page again every few seconds and swaps #figures (as on the
    # queues page): a worker that starts, dies or takes a task shows without a reload.
    body = f'<div id="figures">{"".join(parts)}</div>'
    return HTMLResponse(page("Workers", body, status_line=status, live=LIVE))


def _worker_row(each: FleetWorker, fleet: Fleet) -> list[str]:
    w = each.worker
    offers = "anything" if w.offers is None else ", ".join(w.offers) or "nothing"
    return [
        h(w.id),
        h(w.state),
        h(w.host or "-"),
        h(w.pid or "-"),
        h(w.version or "-"),
        h(", ".join(w.queues)),
        h(offers),
        h(w.concurrency or "-"),
        h(len(each.held)),
        h(w.processed),
        h(w.failed),
        h(utc(w.started_at)),
        h(seen_ago(w, fleet.clock)),
    ]


def _held(claims: tuple[HeldClaim, ...], now: datetime) -> str:
    """A holder's first HELD_SHOWN claims: the page stays one screen a worker, and fast,
    when a fleet holds thousands (a worker's count is in its row above)."""
    rows = []
    for claim in claims[:HELD_SHOWN]:
        left = (claim.lease_until - now).total_seconds()
        state = f"lease ends in {left:.1f} s" if left >= 0 else f"LAPSED {-left:.1f} s ago"
        rows.append(
            [
                link(url(f"/tasks/{claim.task_id}"), claim.task_id),
                status_badge(claim.status.value),
                h(claim.queue),
                h(claim.epoch),
                h(state),
                h(utc(claim.updated_at)),
            ]
        )
    shown = table(["task", "status", "queue", "epoch", "lease", "last written"], rows)
    if len(claims) > HELD_SHOWN:
        more = len(claims) - HELD_SHOWN
        every = link(url("/tasks", status="running"), "the running tasks")
        shown += f'<p class="muted">and {more:,} more: {every} lists them all</p>'
    return shown


async def cron_page(site: Site, request: Request) -> HTMLResponse:
    store = await site.store()
    now = await store.clock()
    known = await store.cron_schedules()
    parts = []
    if site.schedules:
        rows = []
        for schedule in site.schedules:
            fires, moment = [], now
            for _ in range(NEXT_FIRES):
                fire = next_slot(schedule.cron, schedule.timezone, moment)
                if fire is None:
                    break
                fires.append(fire)
                moment = fire
            local = zone(schedule.timezone)
            next_utc = "<br>".join(
                h(f.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")) for f in fires
            )
            next_local = "<br>".join(
                h(f.astimezone(local).strftime("%Y-%m-%d %H:%M %Z")) for f in fires
            )
            rows.append(
                [
                    h(schedule.name),
                    f"<code>{h(schedule.cron)}</code>",
                    h(schedule.timezone),
                    "yes" if schedule.enabled else "no",
                    next_utc or "never",
                    next_local or "never",
                ]
            )
        headings = ["schedule", "cron", "zone", "enabled", "next (UTC)", "next (local)"]
        parts.append(table(headings, rows))
    else:
        parts.append(
            '<p class="muted">start <code>noeta web --cron FILE</code> to see each '
            "schedule's next fires; below is what the store has recorded.</p>"
        )
    names = sorted({*known, *(s.name for s in site.schedules)})
    for name in names:
        history = await store.cron_history(name, HISTORY_ROWS) if name in known else []
        parts.append(f"<h2>{h(name)}</h2>" + _history(history))
    if not names:
        parts.append('<p class="muted">no schedule has fired yet</p>')
    return HTMLResponse(page("Cron", "".join(parts), status_line=h(f"store clock {utc(now)}")))


def _history(records: list[CronFireRecord]) -> str:
    if not records:
        return '<p class="muted">no slot handled yet</p>'
    rows = [
        [
            h(utc(record.slot)),
            h(record.outcome.value),
            link(url(f"/tasks/{record.task_id}"), record.task_id) if record.task_id else "",
            h(record.detail),
            h(utc(record.fired_at)),
        ]
        for record in records
    ]
    return table(["slot", "outcome", "task", "detail", "handled at"], rows)
