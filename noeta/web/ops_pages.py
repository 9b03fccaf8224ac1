"""The operator's other pages: workers (who holds which task, at which epoch, until
when) and cron (each schedule's next fires in UTC and in its zone, and what its latest
slots did)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.core.ports.store import CronFireRecord
from noeta.core.ports.store_views import MAX_PAGE, HeldClaim
from noeta.scheduler.slots import next_slot, zone
from noeta.web.render import h, link, page, status_badge, table, url, utc
from noeta.web.site import Site

HISTORY_ROWS = 10
NEXT_FIRES = 3


async def workers_page(site: Site, request: Request) -> HTMLResponse:
    store = await site.store()
    held = await (await site.views()).held_claims(MAX_PAGE)
    now = await store.clock()
    by_worker: dict[str, list[HeldClaim]] = defaultdict(list)
    for claim in held:
        by_worker[claim.owner].append(claim)
    if not by_worker:
        body = '<p class="muted">no worker holds a task now</p>'
        return HTMLResponse(page("Workers", body, status_line=h(f"store clock {utc(now)}")))
    summary = []
    sections = []
    for worker, claims in sorted(by_worker.items()):
        soonest = min(claim.lease_until for claim in claims)
        left = (soonest - now).total_seconds()
        state = f"lease ends in {left:.1f} s" if left >= 0 else f"LAPSED {-left:.1f} s ago"
        summary.append([h(worker), h(len(claims)), h(utc(soonest)), h(state)])
        rows = [
            [
                link(url(f"/tasks/{claim.task_id}"), claim.task_id),
                status_badge(claim.status.value),
                h(claim.queue),
                h(claim.epoch),
                h(utc(claim.lease_until)),
                h(utc(claim.updated_at)),
            ]
            for claim in claims
        ]
        headings = ["task", "status", "queue", "epoch", "lease until", "last written"]
        sections.append(f"<h2>{h(worker)}</h2>" + table(headings, rows))
    note = (
        "A worker renews all its leases in one statement each round: its lease end is "
        "its last renewal plus its lease. A lapsed lease is one the next claimer may take over."
    )
    body = table(["worker", "tasks held", "soonest lease end", "state"], summary)
    body += f'<p class="muted">{h(note)}</p>' + "".join(sections)
    if len(held) == MAX_PAGE:
        body += f'<p class="muted">the first {MAX_PAGE} held tasks are shown</p>'
    return HTMLResponse(page("Workers", body, status_line=h(f"store clock {utc(now)}")))


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
