"""The task list's filters as a request gives them (status, queue or parent, text (`text`
or `q`), job name, error kind, since), checked: a bad one is a 400 page saying why. The list and its
bulk actions share them."""

from __future__ import annotations

from datetime import UTC, datetime

from noeta.core.errors import NoetaError
from noeta.core.ports.store import TaskStatus, check_key
from noeta.core.ports.store_views import checked_error_kind, checked_search
from noeta.task_columns import since
from noeta.web.site import PageError


def text_of(text: str | None) -> str | None:
    """The text to find in ids, prompts, job names and errors, if one was given and its
    length is one to search for ("" is none)."""
    try:
        return checked_search(text)
    except NoetaError as error:
        raise PageError(400, str(error)) from None


def status_of(text: str | None) -> TaskStatus | None:
    if text is None:
        return None
    try:
        return TaskStatus(text)
    except ValueError:
        known = ", ".join(status.value for status in TaskStatus)
        raise PageError(400, f"unknown status {text!r} (one of {known})") from None


def checked(what: str, text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return check_key(what, text)
    except NoetaError as error:
        raise PageError(400, str(error)) from None


def error_kind_of(text: str | None) -> str | None:
    try:
        return checked_error_kind(text)
    except NoetaError as error:
        raise PageError(400, str(error)) from None


def since_of(text: str | None) -> datetime | None:
    """The moment a `since` filter names (ISO 8601, or a span back: 15m, 2h, 3d)."""
    try:
        return None if text is None else since(text, datetime.now(UTC))
    except NoetaError as error:
        raise PageError(400, str(error)) from None
