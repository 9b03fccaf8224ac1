"""Bulk actions on the task list (issue 30 item 1): with a status filtered, "retry all N"
(failed, cancelled) or "cancel all N" (not finished); each leads to a page that states how
many tasks, whose CSRF-checked POST acts on at most that many, in batches."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.client.bulk_actions import CANCELLABLE, RETRYABLE, BulkOutcome
from noeta.core.errors import ConfigError, NoetaError
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.store_views import COUNT_CAP
from noeta.web.actions import checked_form
from noeta.web.list_filters import checked, status_of, text_of
from noeta.web.render import form, h, link, page, url
from noeta.web.site import PageError, Site, session_of, whole_number

# What each action does, to which statuses, in the words of its button and its page.
VERBS = {
    "retry": ("retry", "retried", RETRYABLE),
    "cancel": ("cancel", "asked to stop", CANCELLABLE),
}


async def buttons(
    site: Site, status: TaskStatus | None, queue: str | None, text: str | None
) -> str:
    """The bulk buttons for the list's filter: none without a status, or with no task."""
    if status is None:
        return ""
    fitting = [name for name, (_, _, statuses) in VERBS.items() if status in statuses]
    if not fitting:
        return ""
    views = await site.views()
    count = await views.count_tasks(statuses=[status], queue=queue, text=text, cap=COUNT_CAP)
    if not count:
        return ""
    shown = f"{count:,}+" if count >= COUNT_CAP else f"{count:,}"
    found = [
        link(
            url(f"/bulk/{name}", status=status.value, queue=queue, text=text),
            f"{name} all {shown}",
            css=f"button bulk-{name}",
        )
        for name in fitting
    ]
    return f'<p class="bulk">{" ".join(found)}</p>'


async def confirm(site: Site, request: Request) -> HTMLResponse:
    """How many tasks the action would touch, and the form that does it."""
    name, status, queue, text = _filter(request.path_params["action"], dict(request.query_params))
    views = await site.views()
    count = await views.count_tasks(statuses=[status], queue=queue, text=text)
    back = link(url("/tasks", status=status.value, queue=queue, text=text), "back to the tasks")
    said = _described(count, status, queue, text)
    if not count:
        body = f'<p class="notice">no task matches: {h(said)}</p><p>{back}</p>'
        return HTMLResponse(page("Nothing to do", body))
    verb = VERBS[name][0]
    path = f"/bulk/{name}"
    fields = "".join(
        f'<input type="hidden" name="{key}" value="{h(value)}">'
        for key, value in (
            ("status", status.value),
            ("queue", queue),
            ("text", text),
            ("count", count),
        )
        if value is not None
    )
    token = site.csrf.issue(session_of(request), path)
    css = "danger" if name == "cancel" else "confirm"
    body = (
        f'<p class="notice" id="bulk-count">{h(verb)} {h(said)}?</p>'
        f'<p class="muted">in batches; at most these {count:,}, newest first'
        + (" (a task retried already is skipped)" if name == "retry" else "")
        + "</p>"
        + form(url(path), token, fields, f"{verb} all {count:,}", css=css)
        + f"<p>{back}</p>"
    )
    return HTMLResponse(page(f"{verb.capitalize()} {count:,} tasks", body))


async def act(site: Site, request: Request) -> HTMLResponse:
    """The confirmed action: at most the confirmed count of the filter's tasks."""
    fields = await checked_form(site, request)
    name, status, queue, text = _filter(request.path_params["action"], fields)
    count = whole_number(fields.get("count"))
    if not count:
        raise PageError(400, "the form names no count of tasks: open the confirmation again")
    client = site.client
    try:
        if name == "retry":
            outcome = await client.retry_many(status=status, queue=queue, text=text, limit=count)
        else:
            outcome = await client.cancel_many(status=status, queue=queue, text=text, limit=count)
    except ConfigError as error:
        raise PageError(400, str(error)) from None
    except NoetaError as error:
        raise PageError(409, str(error)) from None
    back = link(url("/tasks", status=status.value, queue=queue, text=text), "back to the tasks")
    body = f'<p class="notice" id="confirmation">{h(_outcome(name, outcome))}</p><p>{back}</p>'
    for _, why in outcome.refusals:
        body += f'<p class="notice bad">{h(why)}</p>'
    return HTMLResponse(page("Done", body))


def _filter(action: str, given: dict[str, str]) -> tuple[str, TaskStatus, str | None, str | None]:
    if action not in VERBS:
        raise PageError(404, f"there is no bulk action {action!r}")
    status = status_of(given.get("status") or None)
    if status is None:
        raise PageError(400, "a bulk action needs a status: filter the list by one first")
    if status not in VERBS[action][2]:
        allowed = " or ".join(s.value for s in VERBS[action][2])
        raise PageError(400, f"a {status.value} task cannot be {VERBS[action][1]}: only {allowed}")
    queue = checked("queue", given.get("queue") or None)
    text = text_of(given.get("text") or None)
    return action, status, queue, text


def _described(count: int, status: TaskStatus, queue: str | None, text: str | None) -> str:
    said = f"{count:,} {status.value} task{'' if count == 1 else 's'}"
    if queue:
        said += f" of queue {queue}"
    if text:
        said += f" whose id or prompt holds {text!r}"
    return said


def _outcome(name: str, outcome: BulkOutcome) -> str:
    said = f"{VERBS[name][1]} {outcome.done:,} of {outcome.matched:,} tasks"
    if outcome.skipped:
        why = "retried already" if name == "retry" else "finished, or asked to stop already"
        said += f"; {outcome.skipped:,} skipped ({why})"
    if outcome.refused:
        said += f"; {outcome.refused:,} could not be"
    return said
