"""Task ids: the one rule a new task's id follows, and the workspace folder an id names.

An id is also a folder name under the workspaces root, so the rule keeps out everything
a path could use to leave that root ('/', '..', a leading '.', NUL) and anything a shell
or a URL would need quoted (ADR-0036).
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

from noeta.core.errors import PayloadError

MAX_TASK_ID_CHARS = 128
TASK_ID_RULE = (
    f"1-{MAX_TASK_ID_CHARS} characters of letters, digits, '.', '_', ':' and '-', "
    "not starting with '.'"
)
_TASK_ID = re.compile(rf"[A-Za-z0-9_:-][A-Za-z0-9._:-]{{0,{MAX_TASK_ID_CHARS - 1}}}")
# Folder names stay well under every filesystem's 255-byte limit.
MAX_FOLDER_CHARS = 200
# `<root>.retry-N`: the Nth run after the first (N from 1, no leading zero, so that no
# other id reads as the same root and number: "a.retry-0" is a root of its own).
_RETRY_ID = re.compile(r"(?P<root>.+)\.retry-(?P<n>[1-9][0-9]*)")
# What follows `<id>.` in the id of a retry of `<id>` or of one of that retry's subtasks
# (`<retry>.<call>.<n>`). A subtask of `<id>` itself whose call id reads `retry-N` is
# `<id>.retry-N.<n>`: a segment of digits next, so it does not match.
_RETRY_LINE = re.compile(r"retry-[1-9][0-9]*(\.(?![0-9]+(\.|$))|$)")


def check_task_id(task_id: str) -> str:
    """`task_id`, if a new task may have it; otherwise a PayloadError stating the rule."""
    return _follows_the_rule("task id", task_id)


def check_concurrency_key(key: str) -> str:
    """A task's concurrency key (a tenant, a repository) follows the same rule: it is shown
    in `noeta queue list` and compared on every claim of its queue, so it stays plain."""
    return _follows_the_rule("concurrency key", key)


def _follows_the_rule(kind: str, value: str) -> str:
    if _TASK_ID.fullmatch(value):
        return value
    shown = value if len(value) <= 40 else f"{value[:40]}…"
    raise PayloadError(
        f"the {kind} {shown!r} ({len(value)} characters) is not allowed: a {kind} is {TASK_ID_RULE}"
    )


def in_retry_line(task_id: str, other: str) -> bool:
    """Whether `other` is a retry of `task_id` or a subtask of one: named after it
    (ADR-0098) but no subtask of it, so nothing it does reports to `task_id`, and it does
    not keep `task_id` from a prune (ADR-0113)."""
    prefix = f"{task_id}."
    return other.startswith(prefix) and _RETRY_LINE.match(other, len(prefix)) is not None


def retry_task_id(source: str) -> str:
    """The id of the retry of task `source`: `<source>.retry-1`, and for a retry
    `<root>.retry-N` the next number (`f1.retry-1` → `f1.retry-2`). One source has one
    such id, and no two sources share one, so two creates of the same retry meet on the
    tasks' primary key: the second finds the id taken (ADR-0098). A root that would break
    the id rule (too long, or an id from before the rule) is replaced by its digest."""
    found = _RETRY_ID.fullmatch(source)
    root, number = (found["root"], int(found["n"]) + 1) if found else (source, 1)
    made = f"{root}.retry-{number}"
    if _TASK_ID.fullmatch(made):
        return made
    digest = hashlib.sha256(root.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"retried-{digest}.retry-{number}"


def workspace_folder(task_id: str) -> str:
    """The folder under the workspaces root that holds a task's files: one path component.

    A valid id is its own folder. An id from before the rule (or any other string) is
    percent-encoded; '%' is not allowed in ids, so the two kinds never collide, and the
    result never contains '/', never is '.' or '..', and never starts with '.'.
    """
    if _TASK_ID.fullmatch(task_id):
        return task_id
    encoded = quote(task_id.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")
    if len(encoded) > MAX_FOLDER_CHARS:
        digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()
        encoded = f"%{digest}"
    return encoded or "%"
