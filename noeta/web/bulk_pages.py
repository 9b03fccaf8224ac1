"""Bulk actions on the task list (issue 30 item 1, issue 31 items 4 and 5): with a status
filtered, "retry all N" (failed, cancelled), "cancel all N" (not finished) or "prune all
N" (finished), under every filter of the list (queue, text, job, error kind, since); each
leads to a page that states how many tasks, whose CSRF-checked POST starts a run in the
background (bulk_runs.py) acting on at most that many, in batches. The run's page shows
how far it is, stops it between batches, and says what it did: a task that changed since
the count is skipped and counted."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from noeta.client.bulk_actions import CANCELLABLE, PRUNABLE, RETRYABLE, BulkOutcome, Progress
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.store_views import NO_FILTER, TaskFilter
from noeta.web.actions import checked_form
from noeta.web.bulk_runs import BulkRun, new_run_id
from noeta.web.list_filters import checked, error_kind_of, since_of, status_of, text_of
from noeta.web.render import form, h, link, page, url
from noeta.web.site import PageError, Site, session_of, whole_number

# What each action does, to which statuses, in the words of its button and its page.
VERBS = {
    "retry": ("retry", "retried", RETRYABLE),
    "cancel": ("cancel", "asked to stop", CANCELLABLE),
    "prune": ("prune", "pruned", PRUNABLE),
}
LIVE = ' data-refresh="2"'  # live.js reads a running run's page again this often
AGAIN = "Run the action again from the list to go on: what was done is skipped"
UNKNOWN_RUN = (
    "there is no such bulk run here (noeta web keeps the last few, and none across a "
    "restart): run the action again from the list; what was done is skipped"
)
# The buttons count the list's filter up to this many ("retry all 1,000+"); the page
# they lead to counts exactly. At a million tasks, counting 10,000 failed tasks that hold
# a text, or end with an error kind, read 10,000 rows on every view of the list (over a
# second at load); 1,000 is a tenth of that, and the list's own page is 50.
BUTTON_COUNT_CAP = 1_000
SKIPPED = {
    "retry": "retried already",
    "cancel": "finished, or asked to stop already",
    "prune": "kept: a live subtask or parent, or another prune took it",
}


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """The list's filter a bulk action acts on."""

    status: TaskStatus
    queue: str | None = None
    text: str | None = None
    where: TaskFilter = NO_FILTER

    def query(self) -> dict[str, str | None]:
        """The filter as the list's query (and the confirmation's hidden fields)."""
        since = self.where.created_since
        return {
            "status": self.status.value,
            "queue": self.queue,
            "text": self.text,
            "name": self.where.job,
            "error": self.where.error_kind,
            "since": None if since is None else since.isoformat(),
        }


async def buttons(
    site: Site, status: TaskStatus | None, queue: str | None, text: str | None, where: TaskFilter
) -> str:
    """The bulk buttons for the list's filter: none without a status, or with no task."""
    if status is None:
        return ""
    fitting = [name for name, (_, _, statuses) in VERBS.items() if status in statuses]
    if not fitting:
        return ""
    chosen = BulkFilter(status, queue, text, where)
    count = await _count(site, chosen, cap=BUTTON_COUNT_CAP)
    if not count:
        return ""
    shown = f"{count:,}+" if count >= BUTTON_COUNT_CAP else f"{count:,}"
    found = [
        link(
            url(f"/bulk/{name}", **chosen.query()), f"{name} all {shown}", css=f"button bulk-{name}"
        )
        for name in fitting
    ]
    return f'<p class="bulk" id="bulk-actions">{" ".join(found)}</p>'


async def confirm(site: Site, request: Request) -> HTMLResponse:
    """How many tasks the action would touch, and the form that does it."""
    name, chosen = _filter(request.path_params["action"], dict(request.query_params))
    count = await _count(site, chosen)
    back = link(url("/tasks", **chosen.query()), "back to the tasks")
    said = _described(count, chosen)
    if not count:
        body = f'<p class="notice" id="bulk-count">no task matches: {h(said)}</p><p>{back}</p>'
        return HTMLResponse(page("Nothing to do", body))
    verb = VERBS[name][0]
    path = f"/bulk/{name}"
    fields = "".join(
        f'<input type="hidden" name="{key}" value="{h(value)}">'
        for key, value in (*chosen.query().items(), ("count", str(count)))
        if value is not None
    )
    token = site.csrf.issue(session_of(request), path)
    css = "confirm" if name == "retry" else "danger"
    notes = {
        "retry": " (a task retried already is skipped)",
        "prune": " (each goes whole: its log too; its id stays taken)",
    }
    body = (
        f'<p class="notice" id="bulk-count">{h(verb)} {h(said)}?</p>'
        f'<p class="muted">in batches; at most these {count:,}, newest first'
        + notes.get(name, "")
        + "</p>"
        + form(url(path), token, fields, f"{verb} all {count:,}", css=css)
        + f"<p>{back}</p>"
    )
    return HTMLResponse(page(f"{verb.capitalize()} {count:,} tasks", body))


async def act(site: Site, request: Request) -> Response:
    """The confirmed action, started in the background on at most the confirmed count of
    the filter's tasks; the browser goes to its run's page."""
    fields = await checked_form(site, request)
    name, chosen = _filter(request.path_params["action"], fields)
    count = whole_number(fields.get("count"))
    if not count:
        raise PageError(400, "the form names no count of tasks: open the confirmation again")
    back = url("/tasks", **chosen.query())
    run = BulkRun(new_run_id(), name, _described(count, chosen), count, back)
    site.bulk_runs.start(run, lambda progress: _run(site, name, chosen, count, progress))
    return RedirectResponse(url(f"/bulk/runs/{run.id}"), status_code=303)


async def run_page(site: Site, request: Request) -> HTMLResponse:
    """A run's progress (read again every few seconds while it runs), its stop button,
    then what it did."""
    run = site.bulk_runs.get(request.path_params["run"])
    if run is None:
        raise PageError(404, UNKNOWN_RUN)
    await site.bulk_runs.settled(run)  # a small run is done by now: its outcome, at once
    verb = VERBS[run.action][0]
    back = f"<p>{link(run.back, 'back to the tasks')}</p>"
    if not run.finished:
        path = f"/bulk/runs/{run.id}/stop"
        token = site.csrf.issue(session_of(request), path)
        said = (
            f"{verb} {run.described}: {run.outcome.walked:,} of at most {run.confirmed:,} "
            "done so far, in batches"
        )
        if run.stopping:
            said += "; stopping after the batch in progress"
        stop = "" if run.stopping else form(url(path), token, "", "stop", css="danger")
        body = f'<div id="figures"><p class="notice" id="progress">{h(said)}</p>{stop}</div>'
        return HTMLResponse(page(f"{verb.capitalize()}: running", body + back, live=LIVE))
    said = _outcome(run.action, run.outcome, run.confirmed)
    if run.stopped:
        said = f"stopped: {said}. {AGAIN}"
    body = f'<p class="notice" id="confirmation">{h(said)}</p>'
    if run.failure is not None:
        body += f'<p class="notice bad" id="failure">{h(run.failure)}. {h(AGAIN)}</p>'
    for _, why in run.outcome.refusals:
        body += f'<p class="notice bad">{h(why)}</p>'
    return HTMLResponse(page("Done" if run.failure is None else "Stopped", body + back))


async def stop(site: Site, request: Request) -> Response:
    """Ask a run to stop after the batch in progress (its batches so far stay done)."""
    await checked_form(site, request)
    run = site.bulk_runs.get(request.path_params["run"])
    if run is None:
        raise PageError(404, UNKNOWN_RUN)
    run.stopping = True
    return RedirectResponse(url(f"/bulk/runs/{run.id}"), status_code=303)


async def _run(
    site: Site, name: str, chosen: BulkFilter, count: int, progress: Progress
) -> BulkOutcome:
    client, where = site.client, chosen.where
    if name == "cancel":  # a task not finished has no error to select by
        return await client.cancel_many(
            status=chosen.status,
            queue=chosen.queue,
            text=chosen.text,
            job=where.job,
            created_since=where.created_since,
            limit=count,
            progress=progress,
        )
    act_on = client.retry_many if name == "retry" else client.prune_many
    return await act_on(
        status=chosen.status,
        queue=chosen.queue,
        text=chosen.text,
        job=where.job,
        error_kind=where.error_kind,
        created_since=where.created_since,
        limit=count,
        progress=progress,
    )


async def _count(site: Site, chosen: BulkFilter, cap: int | None = None) -> int:
    views = await site.views()
    return await views.count_tasks(
        statuses=[chosen.status], queue=chosen.queue, text=chosen.text, cap=cap, where=chosen.where
    )


def _filter(action: str, given: dict[str, str]) -> tuple[str, BulkFilter]:
    if action not in VERBS:
        raise PageError(404, f"there is no bulk action {action!r}")
    status = status_of(given.get("status") or None)
    if status is None:
        raise PageError(400, "a bulk action needs a status: filter the list by one first")
    if status not in VERBS[action][2]:
        allowed = " or ".join(s.value for s in VERBS[action][2])
        raise PageError(400, f"a {status.value} task cannot be {VERBS[action][1]}: only {allowed}")
    where = TaskFilter(
        job=checked("job name", given.get("name") or None),
        error_kind=error_kind_of(given.get("error") or None),
        created_since=since_of(given.get("since") or None),
    )
    queue = checked("queue", given.get("queue") or None)
    return action, BulkFilter(status, queue, text_of(given.get("text") or None), where)


def _described(count: int, chosen: BulkFilter) -> str:
    said = f"{count:,} {chosen.status.value} task{'' if count == 1 else 's'}"
    if chosen.where.job:
        said += f" of job {chosen.where.job}"
    if chosen.where.error_kind:
        said += f" that ended with {chosen.where.error_kind}"
    if chosen.queue:
        said += f" of queue {chosen.queue}"
    if chosen.text:
        said += f" whose id or prompt holds {chosen.text!r}"
    if chosen.where.created_since:
        said += f" created since {chosen.where.created_since.isoformat()}"
    return said


def _outcome(name: str, outcome: BulkOutcome, confirmed: int) -> str:
    said = f"{VERBS[name][1]} {outcome.done:,} of {outcome.matched:,} tasks"
    if outcome.skipped:
        said += f"; {outcome.skipped:,} skipped ({SKIPPED[name]})"
    if outcome.refused:
        said += f"; {outcome.refused:,} could not be"
    # The walk counts again as it starts: what left the filter since the confirmation.
    if confirmed > outcome.matched:
        gone = confirmed - outcome.matched
        said += (
            f"; {gone:,} of the {confirmed:,} confirmed no longer match (changed since the count)"
        )
    return said
