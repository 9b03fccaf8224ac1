"""What a task's model calls spent, folded for its budget (ADR-0107), and how a budget's
refusal and a person's answer to it change the fold: `fold.py` calls these."""

from __future__ import annotations

from decimal import Decimal
from typing import Protocol

from noeta.core.ports.payload import JSONValue
from noeta.core.rules.events import (
    BudgetExceeded,
    ModelCalled,
    ModelReplied,
    SubtaskReturned,
    TaskCreated,
)
from noeta.core.rules.texts import BUDGET_CALL


class _Folding(Protocol):
    """What of the fold's builder these read and write (fold.py's `_Folding`)."""

    config: TaskCreated | None
    last_seq: int
    model_call_open: int
    spent: tuple[int, int, int, int, int]
    call_estimate: int
    budget_allowed: int
    budget_denied: str
    waiting_call: str
    waiting_input: tuple[tuple[str, JSONValue], ...]
    waiting_question: str
    subtask_tokens: int
    subtask_cost: str


def budget_question(refused: BudgetExceeded) -> str:
    """What the refusal says: the budget, what was spent, the refused call's estimate."""
    if refused.budget == "fleet" and refused.spent == "unknown":
        return (
            f"fleet budget {refused.fleet} {refused.limit}: the next call's cost is unknown "
            f"(the model has no price); its request is estimated at {refused.estimate} "
            "input tokens"
        )
    if refused.budget == "fleet":
        return (
            f"fleet budget {refused.fleet} {refused.limit}: ${refused.spent} spent this "
            f"{refused.fleet.rpartition('-')[2]}, and the next call's request is estimated "
            f"at {refused.estimate} input tokens"
        )
    if refused.budget == "tokens":
        spent, limit = f"{refused.spent} tokens", f"--max-tokens {refused.limit}"
    elif refused.spent == "unknown":  # a model with no price: its cost is never taken as 0
        spent, limit = "an unknown amount (the model has no price)", f"--max-cost {refused.limit}"
    else:
        spent, limit = f"${refused.spent}", f"--max-cost {refused.limit}"
    return (
        f"{limit}: {spent} spent, and the next call's request is estimated at "
        f"{refused.estimate} input tokens"
    )


def refused(f: _Folding, event: BudgetExceeded) -> None:
    """With `fail`, a record: the append that holds it ends the task. With `ask`, the
    task waits for a person's answer, as on a gate's question."""
    if f.config is not None and f.config.on_budget == "ask":
        f.waiting_call, f.waiting_input = BUDGET_CALL, ()
        f.waiting_question = budget_question(event)


def answered(f: _Folding, decision: str, note: str) -> None:
    """A person's answer to an `ask` budget: one more call allowed, or the task fails."""
    if decision == "allow":
        f.budget_allowed = 1  # one call, however many refusals came with no call between
    else:
        said = f": {note}" if note else ""
        f.budget_denied = f"budget_exceeded: {f.waiting_question} (a person denied more{said})"
    f.waiting_call, f.waiting_input, f.waiting_question = "", (), ""


def called(f: _Folding, event: ModelCalled) -> None:
    """A call made: its estimate kept until its outcome; a person's allowance used."""
    f.call_estimate = event.input_estimate
    f.budget_allowed = max(0, f.budget_allowed - 1)


def cut(f: _Folding, cause: str) -> None:
    """The open call was cut: possibly billed, at its estimate, unless never sent (as the
    ledger counts it)."""
    if f.model_call_open and cause != "not_sent" and _billed_here(f):
        i, o, r, w, unanswered = f.spent
        f.spent = (i, o, r, w, unanswered + f.call_estimate)


def replied(f: _Folding, reply: ModelReplied) -> None:
    """A reply's usage; one that said none counts its request's estimate as input."""
    if not _billed_here(f):
        return
    i, o, r, w, unanswered = f.spent
    usage = reply.usage
    if usage is None:
        f.spent = (i + f.call_estimate, o, r, w, unanswered)
    else:
        f.spent = (
            i + usage.input_tokens,
            o + usage.output_tokens,
            r + usage.cache_read_tokens,
            w + usage.cache_write_tokens,
            unanswered,
        )


def returned(f: _Folding, event: SubtaskReturned) -> None:
    """A child's tree's spend, reported with its handback, is this task's too."""
    if _billed_here(f):
        f.subtask_tokens += event.tokens
        f.subtask_cost = add_usd(f.subtask_cost, event.cost)


UNKNOWN = "unknown"


def add_usd(first: str, second: str) -> str:
    """Two amounts of USD as decimal strings ("" is none); unknown if either is."""
    if UNKNOWN in (first, second):
        return UNKNOWN
    return str(Decimal(first or "0") + Decimal(second or "0"))


def _billed_here(f: _Folding) -> bool:
    """Not copied from a fork's source (its calls are the source's, as in the ledger)."""
    return f.config is None or f.last_seq > f.config.forked_at
