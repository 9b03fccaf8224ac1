"""The one error tree of noeta; every error a user can see derives from `NoetaError`.

    NoetaError
    ├── ConfigError            bad input from a user: a URL, a flag, a file
    ├── PayloadError           a value the log cannot hold exactly (raised before any write)
    ├── TaskFailed             the task a client waited on finished failed (its error)
    ├── TaskCancelled          the task a client waited on was cancelled
    ├── ResultTimeout          the task did not finish within the client's timeout
    ├── SoftTimeLimitExceeded  raised inside a job's function at its soft_time_limit
    └── StoreError
        ├── Conflict           the claim was lost or the log moved on; nothing was written
        ├── StoreUnavailable   the store could not be reached; nothing was written
        │   ├── PoolerRefused  ... a pooler refused it before any server saw it
        │   └── StoreUnreachable ... no connection could be opened (libpq's reason)
        ├── CommitUnknown      the connection broke while a write was committing
        │   └── ClaimUnknown   ... a write that carried a claim for this worker
        ├── UnknownTask        no task has that id
        └── SchemaMismatch     the database schema is not the one this code knows

Messages never carry secrets: store errors name host and port, never a password.
"""

from __future__ import annotations


class NoetaError(Exception):
    """Root of every error noeta raises on purpose."""


class ConfigError(NoetaError):
    """A user-supplied setting (store URL, lease, file) is not usable."""


class PayloadError(NoetaError):
    """A value cannot be stored so that it reads back exactly; nothing was written."""


class TaskFailed(NoetaError):
    """The task finished as failed; `error` is its recorded reason (a job's, its tool's)."""

    def __init__(self, task_id: str, error: str) -> None:
        super().__init__(f"task {task_id} failed: {error}")
        self.task_id = task_id
        self.error = error


class TaskCancelled(NoetaError):
    """The task finished as cancelled."""

    def __init__(self, task_id: str, reason: str = "") -> None:
        super().__init__(f"task {task_id} was cancelled" + (f": {reason}" if reason else ""))
        self.task_id = task_id
        self.reason = reason  # e.g. "superseded by ID": a debounced job replaced (ADR-0093)


class ResultTimeout(NoetaError):
    """The task had not finished when the client stopped waiting; it may still finish."""

    def __init__(self, task_id: str, timeout: float) -> None:
        super().__init__(f"task {task_id} did not finish within {timeout:g}s")
        self.task_id = task_id
        self.timeout = timeout


class SoftTimeLimitExceeded(NoetaError):
    """Raised inside a `@noeta.tool` function at its `soft_time_limit` (Celery's
    exception of that name): time to clean up before `time_limit` stops it for real."""


class StoreError(NoetaError):
    """Something went wrong talking to a task store."""


class Conflict(StoreError):
    """The write was refused: the claim's epoch or lease is gone, or the log moved on.

    Nothing was written. The worker must stop writing to this task.
    """

    def __init__(self, task_id: str, reason: str) -> None:
        super().__init__(f"task {task_id}: {reason}")
        self.task_id = task_id
        self.reason = reason


class StoreUnavailable(StoreError):
    """The store could not be reached, or did not answer in time; nothing was written."""


class PoolerRefused(StoreUnavailable):
    """A connection pooler in front of the store refused the statement before any server
    saw it (PgBouncer with no server to give it, ADR-0155): nothing was written. The pooler
    answers at once, so asking again at the next poll costs it one refusal, and a back-off
    grown over its refusal window would keep a worker idle as long again after it ends."""


class StoreUnreachable(StoreUnavailable):
    """No connection to the store could be opened within the deadline: the last attempt
    failed (refused, a name that does not resolve, a login refused), so nothing was sent.
    A stopping worker leaves its housekeeping writes to lapse rather than wait a deadline
    for each (ADR-0156)."""


class CommitUnknown(StoreError):
    """The connection was lost while a write was committing: it may or may not have landed.

    Never retried blindly. The next reader of the log learns what landed.
    """


class ClaimUnknown(CommitUnknown):
    """A write whose outcome is unknown carried a claim of `task_id` for this worker (a
    canvas member's finish claiming its canvas, ADR-0121): if it landed, the claim is
    this worker's, to adopt rather than wait out its lease (ADR-0122)."""

    def __init__(self, message: str, task_id: str) -> None:
        super().__init__(message)
        self.task_id = task_id


class NotStarted(StoreError):
    """A task asked to be created claimed (`NewTask.started`) is in a queue with settings,
    whose limits only the due walk weighs: nothing was written (ADR-0117)."""


class UnknownTask(StoreError):
    """No task has the given id."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id!r}")
        self.task_id = task_id


class SchemaMismatch(StoreError):
    """The database schema is older or newer than the migrations this code ships."""
