"""A task's ledger from its log: each reply counted once, each unanswered request once as
possibly billed, unknown usage never 0, subtasks added in, a fork after its fork point."""

from __future__ import annotations

from noeta.core.ports.model import Text, Usage
from noeta.core.rules.events import (
    Event,
    ModelCallCut,
    ModelCalled,
    ModelFailed,
    ModelReplied,
    TaskCreated,
    TurnEnded,
)
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.ledger import ModelLedger, combined, ledger_of, total_tokens

SONNET = "anthropic:claude-sonnet-4-5"


def logged(*events: Event) -> list[LoggedEvent]:
    return [LoggedEvent(seq, event) for seq, event in enumerate(events, start=1)]


def reply(usage: Usage | None) -> ModelReplied:
    return ModelReplied((Text("ok"),), "end_turn", usage)


def test_each_reply_is_counted_once_and_a_cut_request_once_as_possibly_billed() -> None:
    log = logged(
        TaskCreated(SONNET, "hi"),
        ModelCalled("a", "", 100),
        ModelCallCut(1, "worker_lost"),  # its worker died after sending it
        ModelCalled("a", "", 100),  # the same request, sent again by the next claimer
        reply(Usage(90, 10, 1000, 200)),
        ModelCalled("b", "", 150),
        reply(Usage(20, 30, 1200, 0, 5)),
    )
    assert ledger_of(log) == (
        ModelLedger(
            SONNET,
            replies=2,
            usage=Usage(110, 40, 2200, 200, 5),
            possibly_billed=1,
            possibly_billed_input=100,
        ),
    )
    assert total_tokens(ledger_of(log)) == 110 + 40 + 2200 + 200


def test_a_request_never_sent_or_failed_is_not_billed_and_one_open_at_a_crash_is() -> None:
    log = logged(
        TaskCreated(SONNET, "hi"),
        ModelCalled("a", "", 100),
        ModelCallCut(1, "not_sent"),  # its worker kept word that the request never left
        ModelCalled("a", "", 100),
        ModelFailed("HTTP 401", 1),  # every attempt answered with an error
        TurnEnded("failed", error="llm_error: HTTP 401"),
        ModelCalled("c", "", 70),  # open: its worker died, no one has claimed it since
    )
    assert ledger_of(log) == (ModelLedger(SONNET, possibly_billed=1, possibly_billed_input=70),)


def test_a_reply_without_usage_is_counted_as_unknown_and_an_old_call_as_unestimated() -> None:
    log = logged(
        TaskCreated(SONNET, "hi"),
        ModelCalled("a"),  # written before estimates were recorded
        ModelCallCut(1, "call"),
        ModelCalled("a", "", 40),
        reply(None),
    )
    assert ledger_of(log) == (
        ModelLedger(
            SONNET,
            replies=1,
            replies_without_usage=1,
            possibly_billed=1,
            possibly_billed_unestimated=1,
        ),
    )


def test_a_fork_counts_only_what_came_after_its_fork_point() -> None:
    source = logged(
        TaskCreated(SONNET, "hi"),
        ModelCalled("a", "", 10),
        reply(Usage(10, 1)),
        TurnEnded("answered", "ok"),
    )
    fork = [
        LoggedEvent(1, TaskCreated("openai:gpt-4.1", "hi", forked_from="t1", forked_at=3)),
        *source[1:3],  # copied through seq 3: the source's bill, not the fork's
        LoggedEvent(4, ModelCalled("b", "", 20)),
        LoggedEvent(5, reply(Usage(20, 2))),
    ]
    assert ledger_of(fork) == (ModelLedger("openai:gpt-4.1", replies=1, usage=Usage(20, 2)),)


def test_a_tree_sums_per_model() -> None:
    parent = (ModelLedger(SONNET, replies=2, usage=Usage(10, 2)),)
    children = [
        (ModelLedger(SONNET, replies=1, usage=Usage(5, 1), possibly_billed=1),),
        (ModelLedger("anthropic:claude-haiku-4-5", replies=1, replies_without_usage=1),),
    ]
    assert combined([parent, *children]) == (
        ModelLedger("anthropic:claude-haiku-4-5", replies=1, replies_without_usage=1),
        ModelLedger(SONNET, replies=3, usage=Usage(15, 3), possibly_billed=1),
    )
