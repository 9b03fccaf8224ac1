"""What a person can do from a task's page: cancel it, send it a message, answer the gate
that asked, fork it from a step. Each is a POST whose CSRF token is checked first
(ADR-0071); each answers with a page that says what was done, or why nothing was."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.cli.text import MAX_TEXT_CHARS
from noeta.core.errors import ConfigError, NoetaError, UnknownTask
from noeta.web.render import h, link, page, url
from noeta.web.site import PageError, Site, not_found, session_of, whole_number

MAX_FORM_BYTES = 2 * MAX_TEXT_CHARS
T = TypeVar("T")


async def cancel(site: Site, request: Request) -> HTMLResponse:
    task_id, _ = await _checked(site, request)
    asked = await _done(site.client.cancel(task_id), task_id)
    said = (
        "cancel requested: the worker holding it stops it at its next step"
        if asked
        else "a cancel was requested already; the task stops at its next step"
    )
    return _confirmed(task_id, said)


async def send(site: Site, request: Request) -> HTMLResponse:
    task_id, fields = await _checked(site, request)
    text = fields.get("text", "")
    if len(text) > MAX_TEXT_CHARS:
        raise PageError(
            400, f"the message is {len(text)} characters; the limit is {MAX_TEXT_CHARS}"
        )
    key = fields.get("key") or None
    sent = await _done(site.client.send(task_id, text, key=key), task_id)
    said = "message sent" if sent else "this message was sent already (the form was sent twice)"
    return _confirmed(task_id, said)


async def answer(site: Site, request: Request) -> HTMLResponse:
    task_id, fields = await _checked(site, request)
    call, decision = fields.get("call", ""), fields.get("decision", "")
    await _done(site.client.answer(task_id, call, decision, note=fields.get("note", "")), task_id)
    return _confirmed(task_id, f"call {call} answered: {decision}")


async def fork(site: Site, request: Request) -> HTMLResponse:
    task_id, fields = await _checked(site, request)
    at = whole_number(fields.get("at"))
    if at is None:
        raise PageError(400, f"a fork point is a seq, not {fields.get('at')!r}")
    message = fields.get("message", "").strip() or None
    if message is not None and len(message) > MAX_TEXT_CHARS:
        raise PageError(
            400, f"the message is {len(message)} characters; the limit is {MAX_TEXT_CHARS}"
        )
    workspace = "copy" if fields.get("workspace") == "copy" else "fresh"
    forking = site.client.fork(task_id, at, message=message, workspace=workspace)
    handle = await _done(forking, task_id)
    new = link(url(f"/tasks/{handle.id}"), handle.id)
    body = (
        f'<p class="notice" id="confirmation">forked at seq {at}: task {new} runs on from '
        f"there (nothing before it runs again)</p>"
        f"<p>{link(url(f'/tasks/{task_id}'), 'back to the task')}</p>"
    )
    return HTMLResponse(page(f"Task {task_id}", body))


async def _checked(site: Site, request: Request) -> tuple[str, dict[str, str]]:
    """The task id and the form's fields, once the form's CSRF token is good."""
    return request.path_params["task_id"], await checked_form(site, request)


async def checked_form(site: Site, request: Request) -> dict[str, str]:
    """The form's fields, once its CSRF token is good (for this session and this path)."""
    length = whole_number(request.headers.get("content-length"))
    if length is not None and length > MAX_FORM_BYTES:
        raise PageError(400, f"the form is over {MAX_FORM_BYTES:,} bytes")
    async with request.form(max_files=0, max_fields=20, max_part_size=MAX_FORM_BYTES) as data:
        fields = {k: v for k, v in data.items() if isinstance(v, str)}
    csrf = fields.get("csrf")
    if csrf is not None and not csrf.isascii():
        raise PageError(400, "the form's CSRF token is not one this server wrote")
    # The decoded path, as the page issued it for: a task id with ':' is %3A in the URL.
    refused = site.csrf.check(session_of(request), request.scope["path"], csrf)
    if refused is not None:
        raise PageError(403, f"{refused}: reload the task's page and try again", "Stale form")
    return fields


async def _done(action: Awaitable[T], task_id: str) -> T:
    try:
        return await action
    except UnknownTask:
        raise not_found(f"task with the id {task_id!r}") from None
    except ConfigError as error:  # what was asked cannot be: a blank message, …
        raise PageError(400, str(error)) from None
    except NoetaError as error:  # what was asked cannot be done now: a finished task, …
        raise PageError(409, str(error)) from None


def _confirmed(task_id: str, said: str) -> HTMLResponse:
    back = link(url(f"/tasks/{task_id}"), "back to the task")
    body = f'<p class="notice" id="confirmation">{h(said)}</p><p>{back}</p>'
    return HTMLResponse(page(f"Task {task_id}", body))
