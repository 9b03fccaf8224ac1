"""Bulk actions on the task list (issue 30 item 1, issue 31 item 4): with a status filtered,
"retry all N" (failed, cancelled), "cancel all N" (not finished) or "prune all N"
(finished), under every filter of the list (queue, text, job, error kind, since); each
leads to a page that states how many tasks, whose CSRF-checked POST acts on at most that
many, in batches, and says what it did: a task that changed since the count is skipped
and counted."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.client.bulk_actions import CANCELLABLE, PRUNABLE, RETRYABLE, BulkOutcome
from noeta.core.errors import ConfigError, NoetaError
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.store_views import COUNT_CAP, NO_FILTER, TaskFilter
from noeta.web.actions import checked_form
from noeta.web.list_filters import checked, error_kind_of, since_of, status_of, text_of
from noeta.web.render import form, h, link, page, url
from noeta.web.site import PageError, Site, session_of, whole_number

# What each action does, to which statuses, in the words of its button and its page.
VERBS = {
    "retry": ("retry", "retried", RETRYABLE),
    "cancel": ("cancel", "asked to stop", CANCELLABLE),
    "prune": ("prune", "pruned", PRUNABLE),
}
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
    count = await _count(site, chosen, cap=COUNT_CAP)
    if not count:
        return ""
    shown = f"{count:,}+" if count >= COUNT_CAP else f"{count:,}"
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


async def act(site: Site, request: Request) -> HTMLResponse:
    """The confirmed action: at most the confirmed count of the filter's tasks."""
    fields = await checked_form(site, request)
    name, chosen = _filter(request.path_params["action"], fields)
    count = whole_number(fields.get("count"))
    if not count:
        raise PageError(400, "the form names no count of tasks: open the confirmation again")
    try:
        outcome = await _run(site, name, chosen, count)
    except ConfigError as error:
        raise PageError(400, str(error)) from None
    except NoetaError as error:
        raise PageError(409, str(error)) from None
    back = link(url("/tasks", **chosen.query()), "back to the tasks")
    said = _outcome(name, outcome, count)
    body = f'<p class="notice" id="confirmation">{h(said)}</p><p>{back}</p>'
    for _, why in outcome.refusals:
        body += f'<p class="notice bad">{h(why)}</p>'
    return HTMLResponse(page("Done", body))


async def _run(site: Site, name: str, chosen: BulkFilter, count: int) -> BulkOutcome:
    client, where = site.client, chosen.where
    if name == "cancel":  # a task not finished has no error to select by
        return await client.cancel_many(
            status=chosen.status,
            queue=chosen.queue,
            text=chosen.text,
            job=where.job,
            created_since=where.created_since,
            limit=count,
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
