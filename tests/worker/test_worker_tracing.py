"""Real `noeta worker` processes exporting over OTLP/HTTP to a receiver the test starts
(the path Jaeger uses): one trace per task across a SIGKILL, and no secret in any export
or log line."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.observability.span_record import SpanRecord
from noeta.testing.fake_providers import FakeOpenAI, HttpError
from noeta.testing.otlp_receiver import OtlpReceiver, ReceivedSpan

from .conftest import WorkerProcess, add_task, status_of, until


def exporting_to(receiver: OtlpReceiver, **more: str) -> dict[str, str]:
    # A short batch delay: completed spans leave before a kill can catch them queued.
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_METRIC_EXPORT_INTERVAL": "200",
        **more,
    }


def of_task(spans: list[ReceivedSpan], task_id: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.attributes.get("noeta.task.id") == task_id]


async def test_a_task_killed_mid_tool_call_and_finished_by_another_worker_is_one_trace(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    marker = tmp_path / "ran"
    touch = {
        "tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": f"echo once >> {marker}"}}]
    }
    await add_task(store, tmp_path, "t", touch, {"text": "done"})
    with OtlpReceiver() as receiver:
        env = exporting_to(receiver)
        doomed = workers(postgres_url, "doomed", failpoints="tool.after_started=kill", env=env)
        assert await doomed.exit_code() == -signal.SIGKILL
        heir = workers(postgres_url, "heir", env=env)

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the heir finishes the task")
        heir.signal(signal.SIGTERM)
        assert await heir.exit_code() == 0  # a clean exit exports what is queued
        spans = of_task(receiver.spans(), "t")
        metric_names = receiver.metric_names()

    assert len({span.trace_id for span in spans}) == 1  # ONE trace for the task
    attempts = {
        span.attributes["noeta.epoch"]: span for span in spans if span.name == "noeta.attempt"
    }
    assert sorted(attempts) == [1, 2]  # both attempts are in it
    first, second = attempts[1], attempts[2]
    assert first.attributes["noeta.recovered"] == "takeover"  # emitted by the heir
    assert first.parent_span_id == "" and second.parent_span_id == first.span_id
    assert second.links == ((first.trace_id, first.span_id),)
    assert second.attributes["noeta.worker"] == "heir"
    assert second.attributes["noeta.claim.taken_over"] is True

    # The tool span the kill cut short, with the ids its record in the log gave it.
    log = await store.read_log("t")
    started = next(e for e in log if e.type == "ToolStarted")
    record = SpanRecord.parse(started.data["trace"])  # type: ignore[index,call-overload]
    assert record is not None and record.epoch == 1
    (cut,) = [s for s in spans if s.span_id == f"{record.step:016x}"]
    assert cut.name == "execute_tool Bash" and cut.status_code == 2
    assert cut.attributes["noeta.recovered"] == "takeover"
    assert cut.attributes["gen_ai.tool.call.id"] == "c1"
    assert cut.start_ns == record.step_start
    settled = [
        s for s in spans if s.name == "execute_tool Bash" and s.parent_span_id != cut.parent_span_id
    ]
    assert [s.attributes["noeta.tool.recovery"] for s in settled] == ["unknown"]
    assert not marker.exists()  # killed before it ran; not re-run: Bash is not retry_safe
    assert {
        "noeta.claims",
        "noeta.takeovers",
        "gen_ai.client.operation.duration",
        "noeta.tool.duration",
    } <= metric_names


# Set only once a step has an outcome, or only by the process that ran it; the rest of a
# step span's attributes, a rebuilt one must carry too. `noeta.seq.*` are the log positions
# the live process appended and saw: the heir does not know them, and does not guess.
OUTCOME_KEYS = {
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.response.id",
    "error.type",
    "noeta.tool.recovery",
    "noeta.seq.first",
    "noeta.seq.last",
}
REBUILT_KEYS = {"noeta.recovered", "noeta.epoch", "error.type"}


async def test_steps_rebuilt_after_a_takeover_carry_the_attributes_of_live_ones(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    """SIGKILL mid model call (task m), and mid tool call (task u, in its own queue so its
    killer never runs m): the heir's rebuilt step spans carry the live spans' attributes,
    GenAI's required `gen_ai.provider.name` and `gen_ai.tool.type` among them."""
    await add_task(store, tmp_path, "m", {"text": "done"})
    bash = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "true"}}]}
    script = tmp_path / "u.yaml"
    script.write_text(json.dumps({"replies": [bash, {"text": "done"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Bash",))
    await store.create_task(NewTask("u", [NewEvent(*events.encode(created))], queue="tools"))
    with OtlpReceiver() as receiver:
        env = exporting_to(receiver)
        in_model = workers(postgres_url, "in-model", failpoints="model.after_called=kill", env=env)
        assert await in_model.exit_code() == -signal.SIGKILL
        in_tool = workers(
            postgres_url, "in-tool", failpoints="tool.after_started=kill", queues="tools", env=env
        )
        assert await in_tool.exit_code() == -signal.SIGKILL
        heir = workers(postgres_url, "heir", queues="default,tools", env=env)

        async def done() -> bool:
            return [await status_of(store, task) for task in ("m", "u")] == ["done", "done"]

        await until(done, "the heir finishes both tasks")
        heir.signal(signal.SIGTERM)
        assert await heir.exit_code() == 0
        spans = receiver.spans()

    def step(task: str, prefix: str, rebuilt: bool) -> ReceivedSpan:
        found = [
            s
            for s in of_task(spans, task)
            if s.name.startswith(prefix) and ("noeta.recovered" in s.attributes) == rebuilt
        ]
        assert found, f"no {'rebuilt' if rebuilt else 'live'} {prefix}span of {task}"
        return found[-1]

    for task, prefix in (("m", "chat "), ("u", "execute_tool ")):
        live, rebuilt = step(task, prefix, rebuilt=False), step(task, prefix, rebuilt=True)
        assert rebuilt.name == live.name
        assert rebuilt.attributes["noeta.recovered"] == "takeover"
        expected = {k: v for k, v in live.attributes.items() if k not in OUTCOME_KEYS}
        carried = {k: v for k, v in rebuilt.attributes.items() if k not in REBUILT_KEYS}
        assert carried == expected
    assert step("m", "chat ", rebuilt=True).attributes["gen_ai.provider.name"] == "scripted"
    assert step("u", "execute_tool ", rebuilt=True).attributes["gen_ai.tool.type"] == "function"


async def test_no_secret_reaches_an_exported_span_metric_or_log_line(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    password = conninfo_to_dict(postgres_url)["password"]
    assert password  # the test server's DSN carries a real password
    openai_key = "sk-proj-SECRETopenai0123456789"
    anthropic_key = "sk-ant-SECRETanthropic0123456789"
    secrets = [str(password), openai_key, anthropic_key]
    # A model that refuses the key and quotes it back (as OpenAI does) ...
    created = events.TaskCreated(model="openai:gpt-test", prompt="hello")
    await store.create_task(NewTask("refused", [NewEvent(*events.encode(created))]))
    # ... and a model that puts the store's password in a tool call, with content captured.
    leaky = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": f"echo {password}"}}]}
    script = tmp_path / "leaky.yaml"
    script.write_text(json.dumps({"replies": [leaky, {"text": f"it was {password}"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Bash",))
    await store.create_task(NewTask("leaky", [NewEvent(*events.encode(created))]))
    with FakeOpenAI() as model, OtlpReceiver() as receiver:
        model.script(HttpError(401))
        env = exporting_to(
            receiver,
            OPENAI_API_KEY=openai_key,
            OPENAI_BASE_URL=model.base_url,
            ANTHROPIC_API_KEY=anthropic_key,
            OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
        )
        worker = workers(postgres_url, "w", env=env)

        async def both_ended() -> bool:
            statuses = [await status_of(store, task) for task in ("refused", "leaky")]
            return statuses == ["failed", "done"]

        await until(both_ended, "both tasks end")
        worker.signal(signal.SIGTERM)
        assert await worker.exit_code() == 0
        spans = receiver.spans()
        exported = b"".join(receiver.bodies())
    assert model.requests[0].headers["authorization"] == f"Bearer {openai_key}"  # it was sent

    refused = next(s for s in of_task(spans, "refused") if s.name == "chat gpt-test")
    assert refused.status_code == 2 and refused.attributes["error.type"] == "401"
    tool = next(s for s in of_task(spans, "leaky") if s.name == "execute_tool Bash")
    assert "[redacted]" in tool.attributes["gen_ai.tool.call.arguments"]  # captured, scrubbed
    text = worker.log()
    assert "claimed task refused" in text  # the log is not empty either
    for secret in secrets:
        assert secret.encode() not in exported
        assert secret not in text
