"""A model reply that comes after its claim was gone is handed over, not sent for again
(ADR-0082): real `noeta worker` processes and a fake provider at the wire; the worker is
held after the reply by a `pause` failpoint while its lease lapses and another worker
takes the task over, so the order of events is the test's, never a race."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any, cast

from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.testing.fake_providers import FakeAnthropic, Reply
from noeta.testing.otlp_receiver import OtlpReceiver

from .conftest import WorkerProcess, lapse_the_lease, log_types, status_of, until
from .test_late_results import LONG_LEASE, noeta_show
from .test_worker_tracing import exporting_to, of_task


async def test_a_reply_whose_claim_lapsed_is_recorded_by_the_next_worker_without_a_resend(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    created = events.TaskCreated(model="anthropic:fake-model", prompt="go", tools=())
    await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    with FakeAnthropic() as provider, OtlpReceiver() as receiver:
        provider.script(Reply(text="the kept answer"), Reply(text="sent twice"))
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": provider.base_url}
        env |= exporting_to(receiver)
        late = workers(
            postgres_url, "late", lease=LONG_LEASE, env=env, failpoints="model.after_reply=pause"
        )
        await until(late.paused, "the model answers and the worker freezes before recording it")
        assert len(provider.requests) == 1
        assert await lapse_the_lease(postgres_url, "t") == 1
        # The heir takes the task over and freezes before loading it.
        failpoint = "claim.after_commit=pause@1"
        heir = workers(postgres_url, "heir", lease=LONG_LEASE, env=env, failpoints=failpoint)
        await until(heir.paused, "the heir takes the task over and freezes")
        assert (await store.get_task("t")).owner_epoch == 2  # type: ignore[union-attr]
        late.signal(signal.SIGCONT)  # its append is refused: the claim is the heir's now

        async def kept() -> bool:
            return bool(await store.late_results("t")) and "kept for the next" in late.log()

        await until(kept, "the woken worker keeps the reply beside the log")
        assert (await log_types(store, "t"))[-1] == "ModelCalled"  # its append was refused
        heir.signal(signal.SIGCONT)

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the next worker records the kept reply and finishes the task")
        assert len(provider.requests) == 1  # sent once, by the worker whose claim lapsed
        heir.signal(signal.SIGTERM)
        assert await heir.exit_code() == 0  # a clean exit exports what is queued
        spans = of_task(receiver.spans(), "t")
    log = await store.read_log("t")
    replies = [cast(dict[str, Any], e.data) for e in log if e.type == "ModelReplied"]
    assert [reply["content"] for reply in replies] == [
        [{"type": "text", "text": "the kept answer"}]
    ]
    assert "ModelCallCut" not in [e.type for e in log]
    # The heir closed the call's step: the call's own span cut short, and a chat span of
    # its own for the reply it recorded (no tokens: the receiving worker counted them).
    chats = [span for span in spans if span.name == "chat fake-model"]
    cut = [span for span in chats if span.attributes.get("noeta.recovered") == "takeover"]
    assert len(cut) == 1
    (recorded,) = [span for span in chats if "noeta.recovered" not in span.attributes]
    replied_seq = next(e.seq for e in log if e.type == "ModelReplied")
    assert recorded.attributes["noeta.seq.first"] == replied_seq
    assert "gen_ai.usage.input_tokens" not in recorded.attributes
    assert len({span.trace_id for span in spans}) == 1
    shown = noeta_show(postgres_url)
    assert "noeta model reply, epoch 1" in shown
    assert f"recorded at seq {log[-1].seq - 2}" in shown  # ModelReplied, TurnEnded, TaskFinished
