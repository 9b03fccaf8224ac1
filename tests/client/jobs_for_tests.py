"""Decorated functions the job tests enqueue and a real worker runs. Each writes what it
did to the ledger file named by $NOETA_TEST_LEDGER; `die_once` SIGKILLs the worker once
per key, mid-run, after the side effect (a marker file says it happened)."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import signal
import threading
import time
from pathlib import Path

import noeta
from noeta.core.ports.tool import ToolContext


def ledger() -> Path:
    return Path(os.environ["NOETA_TEST_LEDGER"])


def record(line: str) -> None:
    with ledger().open("a") as file:
        file.write(line + "\n")


def die_once(key: str) -> None:
    marker = ledger().with_name(f"died-{key.replace(':', '-')}")
    if os.environ.get("NOETA_TEST_DIE") and not marker.exists():
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)


@noeta.tool(retry_safe=True)
def resize(image: str, width: int, ctx: ToolContext) -> dict[str, object]:
    """Resize an image (the same result every time: safe to run again)."""
    record(f"resize {ctx.idempotency_key}")
    die_once(ctx.idempotency_key)
    return {"image": image, "width": width}


def find_charge(customer: str, cents: int, ctx: ToolContext) -> dict[str, object] | None:
    """What a half-done charge did: the processor's record under the idempotency key."""
    charged = f"charge {ctx.idempotency_key} {customer} {cents}"
    if ledger().exists() and charged in ledger().read_text().splitlines():
        return {"charged": cents, "found": True}
    return None


@noeta.tool(recover=find_charge)
def charge(customer: str, cents: int, ctx: ToolContext) -> dict[str, object]:
    """Charge a customer's card, once."""
    record(f"charge {ctx.idempotency_key} {customer} {cents}")
    die_once(ctx.idempotency_key)
    return {"charged": cents, "found": False}


@noeta.tool
def send_email(to: str, ctx: ToolContext) -> str:
    """Send an email: neither safe to repeat nor findable afterwards."""
    record(f"email {ctx.idempotency_key} {to}")
    die_once(ctx.idempotency_key)
    return f"sent to {to}"


@noeta.tool(max_attempts=3, retry_on=(ConnectionError,), first_backoff=0.01)
def flaky(fails: int, ctx: ToolContext) -> int:
    """Fails `fails` times with ConnectionError, then returns how many attempts it took."""
    attempts = (
        1 + sum(1 for line in ledger().read_text().splitlines() if line == f"flaky {ctx.task_id}")
        if ledger().exists()
        else 1
    )
    record(f"flaky {ctx.task_id}")
    if attempts <= fails:
        raise ConnectionError(f"attempt {attempts} refused")
    return attempts


@noeta.tool(max_attempts=5, retry_on=(ConnectionError,), first_backoff=0.01)
def broken(reason: str) -> None:
    """Raises an error no retry is for: it fails at once."""
    raise ValueError(reason)


@noeta.tool(time_limit=0.3)
async def too_slow() -> None:
    """Never done within its time limit."""
    await asyncio.Event().wait()


def gate_of(ledger: Path, pid: int) -> Path:
    """The file that lets the gated functions of worker process `pid` return."""
    return ledger.with_name(f"open-{pid}")


@noeta.tool
def waits_for_its_gate(n: int) -> int:
    """Runs until the test opens its worker's gate: mid-run for as long as a test needs.
    Neither safe to repeat nor findable afterwards: a cut-off run is "outcome unknown"."""
    record(f"start {n} {os.getpid()}")
    while not gate_of(ledger(), os.getpid()).exists():
        time.sleep(0.01)  # the function's own work; the test waits on the ledger
    record(f"done {n} {os.getpid()}")
    return n


@noeta.tool
async def waits_until_stopped(n: int) -> int:
    """An async function that never ends by itself: only a cancellation stops it."""
    record(f"start {n} {os.getpid()}")
    await asyncio.Event().wait()
    return n


def _alive(pid: str, thread: str) -> bool:
    return Path(f"/proc/{pid}/task/{thread}").exists()


@noeta.tool(max_attempts=3, time_limit=1, first_backoff=0.01)
def outlives_its_limit() -> None:
    """Runs far past its time limit; each attempt records whether an earlier one still
    runs (its process and thread still exist): a ledger of copies at once."""
    if ledger().exists():
        for line in ledger().read_text().splitlines():
            _, pid, thread = line.split()[:3]
            if _alive(pid, thread):
                record(f"overlap {pid} {thread}")
    record(f"attempt {os.getpid()} {threading.get_native_id()}")
    time.sleep(60)  # the function's own work, never done within its limit


@noeta.tool(time_limit=600)
def sleeps_in_its_process(n: int) -> int:
    """A sync function with a time limit (so in a process of its own) that a cancel stops."""
    record(f"start {os.getpid()} {threading.get_native_id()}")
    time.sleep(600)  # the function's own work; only a cancel ends it
    return n


@noeta.tool(time_limit=60)
def chatty(n: int) -> int:
    """Prints as it works, as jobs do: its own process's stdout is not its reply's."""
    print("working on", n, '{"value": -1}')
    return n * 2


@noeta.tool(time_limit=60)
def dumpable() -> int:
    """Whether its process may be read by others of its user (prctl PR_GET_DUMPABLE)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    return int(libc.prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE


@noeta.tool(soft_time_limit=0.2, time_limit=600)
def cleans_up_at_its_soft_limit() -> str:
    """A sync function the soft limit interrupts; it catches it and cleans up in time."""
    record(f"start {os.getpid()}")
    try:
        time.sleep(600)  # the function's own work, never done within its soft limit
    except noeta.SoftTimeLimitExceeded:
        record("cleaned up")
        return "cleaned up"
    return "slept"


@noeta.tool(soft_time_limit=0.2, time_limit=600)
def ignores_its_soft_limit_cleanup() -> None:
    """A sync function that does not catch its soft limit: the run fails saying so."""
    time.sleep(600)


@noeta.tool(soft_time_limit=0.2)
def has_only_a_soft_limit() -> str:
    """A soft limit alone: the function still runs in a process of its own."""
    try:
        time.sleep(600)
    except noeta.SoftTimeLimitExceeded:
        return f"stopped softly in {os.getpid()}"
    return "slept"


@noeta.tool(time_limit=600)
def ignores_sigterm(n: int) -> int:
    """A sync function (in a process of its own) that ignores SIGTERM: only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record(f"start {os.getpid()} {threading.get_native_id()}")
    time.sleep(600)  # the function's own work; only SIGKILL ends it
    return n


def _attempt_of(name: str, ctx: ToolContext) -> int:
    """This attempt's number, from the ledger (each attempt records itself first)."""
    line = f"{name} {ctx.task_id}"
    done = ledger().read_text().splitlines() if ledger().exists() else []
    record(line)
    return 1 + done.count(line)


@noeta.tool(max_attempts=3, retry_on=(ConnectionError,), backoff="fixed", backoff_base=3600)
def refused_twice(ctx: ToolContext) -> int:
    """Refused on its first two attempts, then returns the attempt's number. Its retries
    wait an hour in the queue: the test brings each forward when it has seen the wait."""
    attempt = _attempt_of("refused_twice", ctx)
    if attempt <= 2:
        raise ConnectionError(f"attempt {attempt} refused")
    return ctx.attempt  # the log's count, the same as the ledger's


@noeta.tool(retry_safe=True, max_attempts=2, retry_on=(ConnectionError,), first_backoff=0.01)
def refused_then_dies(ctx: ToolContext) -> int:
    """Refused on its first attempt; its second kills its worker mid-run (once)."""
    attempt = _attempt_of("refused_then_dies", ctx)
    if attempt == 1:
        raise ConnectionError("attempt 1 refused")
    die_once(ctx.idempotency_key)
    return attempt


@noeta.tool
def fails_the_first_time(ctx: ToolContext) -> int:
    """Fails the first time any task runs it (a bug since fixed), then returns how many
    runs there were: what `noeta retry` is for."""
    runs = 1 + sum(
        line.startswith("fails_the_first_time ")
        for line in (ledger().read_text().splitlines() if ledger().exists() else [])
    )
    record(f"fails_the_first_time {ctx.task_id}")
    if runs == 1:
        raise RuntimeError("the first run fails")
    return runs


@noeta.tool(time_limit=60)
def tells_its_attempt(ctx: ToolContext) -> int:
    """Returns its attempt's number, in a process of its own (it has a time limit)."""
    return ctx.attempt


_BARRIERS: dict[int, threading.Barrier] = {}
_BARRIERS_LOCK = threading.Lock()


@noeta.tool
def meets_the_others(parties: int) -> int:
    """Waits in its thread until `parties` calls of it wait at once: they all meet only
    if the worker gives each call a thread (else the barrier breaks after a minute)."""
    with _BARRIERS_LOCK:
        barrier = _BARRIERS.setdefault(parties, threading.Barrier(parties))
    return barrier.wait(timeout=60)
