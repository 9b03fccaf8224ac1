"""A model reply that came but could not be recorded is handed over (ADR-0082, issue 26
item 2): its worker keeps it beside the log, and the next claimer records it instead of
sending the request again, only for the very call and request it answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.models.scripted import ScriptedProvider
from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import Conflict, StoreError
from noeta.core.ports.model import ModelReply, OnDelta, Provider, Text
from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.store import Claim, LateResult, Store, StoredEvent
from noeta.core.rules import events
from noeta.core.runner import model_reply
from noeta.core.runner.task import TaskRunner
from noeta.testing.fault_proxy import FaultProxy
from tests.cluster.processes import APPENDS

from .test_runner import LEASE, Crash, CrashingProvider, Fixed, create, script


@pytest.fixture
async def direct(postgres_url: str) -> AsyncIterator[Store]:
    await migrate_database(postgres_url)
    store = await PostgresStore.open(postgres_url)
    yield store
    await store.close()


@pytest.fixture
def proxy(direct: Store, postgres_url: str) -> Iterator[FaultProxy]:
    parts = conninfo_to_dict(postgres_url)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]), cut_functions=APPENDS)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def proxied(postgres_url: str, proxy: FaultProxy) -> AsyncIterator[Store]:
    dsn = make_conninfo(postgres_url, host="127.0.0.1", port=str(proxy.port))
    store = await PostgresStore.open(dsn, deadline_seconds=5.0, max_connections=1)
    yield store
    await store.close()


@dataclass
class Answering:
    """The provider: counts the requests it gets, and does `meanwhile` (a fault) once it
    has answered the first, before its worker can record the reply."""

    inner: Provider
    meanwhile: Callable[[], Awaitable[None]] | None = None
    name: str = "scripted"
    bodies: list[bytes] = field(default_factory=list)

    def encode_request(self, request: Any, *, stream: bool = True) -> bytes:
        return self.inner.encode_request(request, stream=stream)

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        self.bodies.append(body)
        reply = await self.inner.send(body)
        if self.meanwhile is not None and len(self.bodies) == 1:
            await self.meanwhile()
        return reply

    async def close(self) -> None:
        await self.inner.close()


def answering(model: str, meanwhile: Callable[[], Awaitable[None]] | None = None) -> Answering:
    return Answering(ScriptedProvider.from_file(model.split(":", 1)[1]), meanwhile)


async def types_of(store: Store) -> list[str]:
    return [e.type for e in await store.read_log("t")]


async def replies_in(store: Store) -> list[Any]:
    log = await store.read_log("t")
    return [cast(dict[str, Any], e.data)["content"] for e in log if e.type == "ModelReplied"]


async def test_a_reply_whose_append_was_cut_is_recorded_by_the_next_claimer_unsent(
    direct: Store, proxied: Store, proxy: FaultProxy, tmp_path: Path
) -> None:
    model = script(tmp_path, {"text": "the kept answer"}, {"text": "sent twice"})
    await create(direct, "t", model, prompt="go")

    async def cut_the_reply_append() -> None:
        proxy.cut_statement(before=True)  # the append never reaches the server

    provider = answering(model, cut_the_reply_append)
    first = await proxied.claim_task("first", "t", LEASE)
    assert first is not None
    with pytest.raises(StoreError):
        await TaskRunner(proxied, Fixed(provider)).run(first)
    assert proxy.statements_cut["before"] == 1
    assert await types_of(direct) == ["TaskCreated", "ModelCalled"]
    (kept,) = await direct.late_results("t")
    assert (kept.call_id, kept.epoch, kept.worker) == ("noeta model reply, epoch 1", 1, "first")
    # The first worker's claim is freed by the test (as a lapse would), not by a race.
    assert await direct.release(first)
    heir = await direct.claim_task("heir", "t", LEASE)
    assert heir is not None
    result = await TaskRunner(direct, Fixed(provider)).run(heir)
    assert (result.state.finished, result.state.last_answer) == ("done", "the kept answer")
    assert len(provider.bodies) == 1  # the request was sent once, by the first worker
    assert await types_of(direct) == [
        "TaskCreated",
        "ModelCalled",
        "ModelReplied",
        "TurnEnded",
        "TaskFinished",
    ]  # not a cut: no ModelCallCut
    log = await direct.read_log("t")
    assert log[2].epoch == heir.epoch  # through the heir's fence


async def test_a_reply_that_came_after_a_takeover_is_recorded_by_the_heir(
    direct: Store, tmp_path: Path
) -> None:
    model = script(tmp_path, {"text": "the kept answer"}, {"text": "sent twice"})
    await create(direct, "t", model, prompt="go")
    assert isinstance(direct, ModelLimiter)
    await direct.set_model_limit("scripted/model", rpm=1000, tpm=None)
    claims: list[Claim] = []

    async def taken_over() -> None:
        # The lease lapsed while the model answered, and another worker took the task.
        assert await direct.release(claims[0])
        heir = await direct.claim_task("heir", "t", LEASE)
        assert heir is not None
        claims.append(heir)

    provider = answering(model, taken_over)
    first = await direct.claim_task("first", "t", LEASE)
    assert first is not None
    claims.append(first)
    with pytest.raises(Conflict):
        await TaskRunner(direct, Fixed(provider)).run(first)
    result = await TaskRunner(direct, Fixed(provider)).run(claims[1])
    assert (result.state.finished, result.state.last_answer) == ("done", "the kept answer")
    assert len(provider.bodies) == 1
    assert await replies_in(direct) == [[{"type": "text", "text": "the kept answer"}]]
    assert "ModelCallCut" not in await types_of(direct)
    (limit,) = await direct.model_limits()
    assert limit.calls == 1  # the heir took no budget: it called nothing


async def cut_call(store: Store, model: str, provider: CrashingProvider) -> str:
    """Task t whose claim of epoch 2 (epoch 1 wrote nothing) sent its request and died
    before the reply; returns the request's sha256, as its ModelCalled recorded it."""
    await create(store, "t", model, prompt="go")
    idle = await store.claim_task("idle", "t", LEASE)
    assert idle is not None and await store.release(idle)
    claim = await store.claim_task("w", "t", LEASE)
    assert claim is not None and claim.epoch == 2
    with pytest.raises(Crash):
        await TaskRunner(store, Fixed(provider)).run(claim)
    assert await store.release(claim)  # as a lapse would
    (called,) = [e for e in await store.read_log("t") if e.type == "ModelCalled"]
    return str(cast(dict[str, Any], called.data)["request_sha256"])


def kept(epoch: int, request_sha256: str, text: str = "a stale answer") -> LateResult:
    _, data = events.encode(events.ModelReplied((Text(text),), "end_turn"))
    content = json.dumps({"request_sha256": request_sha256, "reply": data})
    return LateResult("t", model_reply.kept_reply_call_id(epoch), content, False, epoch, "w")


KEPT_FOR = {
    "its own": lambda sha256: kept(2, sha256),  # the control: this one is used
    "another request": lambda sha256: kept(2, "cd" * 32),
    "another epoch": lambda sha256: kept(1, sha256),
}


@pytest.mark.parametrize("which", KEPT_FOR)
async def test_only_a_reply_kept_for_the_call_itself_is_used_else_the_request_is_resent_as_it_was(
    direct: Store, tmp_path: Path, which: str
) -> None:
    model = script(tmp_path, {"text": "sent again"})
    provider = CrashingProvider(ScriptedProvider.from_file(model.split(":", 1)[1]), crashes=1)
    request_sha256 = await cut_call(direct, model, provider)
    assert await direct.keep_late_result(KEPT_FOR[which](request_sha256))
    heir = await direct.claim_task("heir", "t", LEASE)
    assert heir is not None
    result = await TaskRunner(direct, Fixed(provider)).run(heir)
    log = await direct.read_log("t")
    cuts = [cast(dict[str, Any], e.data) for e in log if e.type == "ModelCallCut"]
    if which == "its own":
        assert (result.state.finished, result.state.last_answer) == ("done", "a stale answer")
        assert len(provider.bodies) == 1 and cuts == []
        return
    assert (result.state.finished, result.state.last_answer) == ("done", "sent again")
    assert len(provider.bodies) == 2 and provider.bodies[1] == provider.bodies[0]
    assert [(cut["epoch"], cut["cause"]) for cut in cuts] == [(2, "worker_lost")]


def stored_call(epoch: int, request_sha256: str) -> StoredEvent:
    _, data = events.encode(events.ModelCalled(request_sha256))
    return StoredEvent("t", 2, "ModelCalled", data, datetime.now(UTC), epoch, "w")


def test_the_kept_reply_chosen_is_the_one_for_the_calls_epoch_and_request() -> None:
    called = stored_call(3, "ab" * 32)
    fits = kept(3, "ab" * 32, "fits")
    assert model_reply.kept_for(called, [kept(2, "ab" * 32), fits]) == events.ModelReplied(
        (Text("fits"),), "end_turn"
    )
    assert model_reply.kept_for(called, [kept(3, "cd" * 32)]) is None
    assert model_reply.kept_for(called, [kept(2, "ab" * 32)]) is None
    # Keyed for epoch 3 but kept by another epoch's claim: not the call's own worker.
    forged = LateResult("t", fits.call_id, fits.content, False, 2, "w")
    assert model_reply.kept_for(called, [forged]) is None
    unreadable = LateResult("t", fits.call_id, "not json", False, 3, "w")
    assert model_reply.kept_for(called, [unreadable]) is None
    # A tool's late result is never taken for a reply.
    tool = LateResult("t", "call-1", fits.content, False, 3, "w")
    assert model_reply.kept_for(called, [tool]) is None
