"""A task's ledger, from its log alone: per model, the usage of each reply counted once,
the replies that said no usage, and the requests whose reply never came ("possibly
billed", with their estimated input tokens). Pure: the same log gives the same ledger.

A request is possibly billed when its `ModelCalled` was closed by a `ModelCallCut` other
than "not_sent" (the worker died or the call was cut after the request left), or is
still open (in flight, or its worker died and no one has claimed the task since). A
`ModelFailed` is not: the provider answered every attempt with an error. A fork's ledger
starts after its fork point: what it copied is its source's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from noeta.core.ports.model import Usage
from noeta.core.rules.events import (
    ModelCallCut,
    ModelCalled,
    ModelFailed,
    ModelReplied,
    TaskCreated,
)

if TYPE_CHECKING:  # a ledger is read where no fold is (`noeta submit` loads the config)
    from noeta.core.rules.fold import LoggedEvent


@dataclass(frozen=True, slots=True)
class ModelLedger:
    """One model's calls in a task (or a tree of tasks)."""

    model: str  # the model spec, e.g. "anthropic:claude-sonnet-4-5"
    replies: int = 0
    usage: Usage = field(default_factory=Usage)  # of the replies that said their usage
    replies_without_usage: int = 0  # their tokens are unknown, never taken as 0
    possibly_billed: int = 0  # requests sent whose reply never came
    possibly_billed_input: int = 0  # those requests' estimated input tokens
    # Of those requests, the ones logged before estimates were recorded: not in the sum.
    possibly_billed_unestimated: int = 0

    def plus(self, other: ModelLedger) -> ModelLedger:
        return ModelLedger(
            self.model,
            self.replies + other.replies,
            self.usage.plus(other.usage),
            self.replies_without_usage + other.replies_without_usage,
            self.possibly_billed + other.possibly_billed,
            self.possibly_billed_input + other.possibly_billed_input,
            self.possibly_billed_unestimated + other.possibly_billed_unestimated,
        )


# A ledger: one entry per model that was called, in the models' order.
Ledger = tuple[ModelLedger, ...]


def ledger_of(log: Iterable[LoggedEvent]) -> Ledger:
    """The ledger of one task's log (not its subtasks': see `combined`)."""
    model, forked_at = "", 0
    by_model: dict[str, ModelLedger] = {}
    open_call: ModelCalled | None = None

    def add(entry: ModelLedger) -> None:
        known = by_model.get(model)
        by_model[model] = entry if known is None else known.plus(entry)

    def possibly_billed(call: ModelCalled) -> None:
        estimated = call.input_estimate
        add(
            ModelLedger(
                model,
                possibly_billed=1,
                possibly_billed_input=estimated,
                possibly_billed_unestimated=0 if estimated else 1,
            )
        )

    for logged in log:
        event = logged.event
        if isinstance(event, TaskCreated):
            model, forked_at = event.model, event.forked_at
        if logged.seq <= forked_at:
            continue  # copied from the fork's source: billed to the source
        match event:
            case ModelCalled():
                if open_call is not None:  # a log this code does not write; counted all the same
                    possibly_billed(open_call)
                open_call = event
            case ModelReplied(usage=usage):
                if usage is None:
                    add(ModelLedger(model, replies=1, replies_without_usage=1))
                else:
                    add(ModelLedger(model, replies=1, usage=usage))
                open_call = None
            case ModelCallCut(cause=cause):
                if open_call is not None and cause != "not_sent":
                    possibly_billed(open_call)
                open_call = None
            case ModelFailed():
                open_call = None
            case _:
                pass
    if open_call is not None:
        possibly_billed(open_call)
    return tuple(by_model[name] for name in sorted(by_model))


def combined(ledgers: Iterable[Ledger]) -> Ledger:
    """One ledger of several tasks' (a task and its subtasks): per model, the sums."""
    by_model: dict[str, ModelLedger] = {}
    for ledger in ledgers:
        for entry in ledger:
            known = by_model.get(entry.model)
            by_model[entry.model] = entry if known is None else known.plus(entry)
    return tuple(by_model[name] for name in sorted(by_model))


def total_tokens(ledger: Ledger) -> int:
    """Every token the replies said they used (input of every kind, and output)."""
    return sum(e.usage.all_input_tokens + e.usage.output_tokens for e in ledger)
