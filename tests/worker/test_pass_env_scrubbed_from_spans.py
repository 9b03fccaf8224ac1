"""The values of the variables an operator passes to commands (`pass_env:`) are secrets
unless proven otherwise: a real worker exporting spans, with content capture on, sends
none of them, whatever their names, when a command prints them; nor a key of a known
format that the worker never held."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

from noeta.core.ports.store import Store
from noeta.testing.otlp_receiver import OtlpReceiver

from .conftest import WorkerProcess, add_task, status_of, until
from .test_worker_tracing import exporting_to, of_task

# Names the secret-name rule does not catch, values no key format matches.
PASSED = {
    "DB_PASS": "correct-horse-battery",
    "SMTP_PASS": "smtp-0x7f3a9c",
    "GH_PAT": "pat-9a8b7c6d5e4f",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T0001/B0002/XXsecretXX",
}
SHORT = "abc1234"  # 7 characters: too short to scrub without blanking ordinary text
# A key the worker never held, printed from two halves: scrubbed by its shape alone.
GITHUB_KEY = "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"


async def test_values_passed_to_commands_never_reach_an_exported_span(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    config = tmp_path / "noeta.yaml"
    names = [*PASSED, "SHORT_ONE"]
    plugin = {"module": "noeta.plugins.core", "params": {"pass_env": names}}
    config.write_text(json.dumps({"plugins": [plugin]}))
    command = "echo " + " ".join(f'"${name}"' for name in names)
    command += f"; printf '%s%s\\n' '{GITHUB_KEY[:20]}' '{GITHUB_KEY[20:]}'"
    call = {"id": "c1", "name": "Bash", "input": {"command": command}}
    await add_task(store, tmp_path, "t", {"tool_calls": [call]}, {"text": "done"})
    with OtlpReceiver() as receiver:
        env = exporting_to(
            receiver,
            **PASSED,
            SHORT_ONE=SHORT,
            NOETA_CONFIG=str(config),
            OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
        )
        worker = workers(postgres_url, "w", env=env)

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the task ends")
        worker.signal(signal.SIGTERM)
        assert await worker.exit_code() == 0
        spans = of_task(receiver.spans(), "t")
        exported = b"".join(receiver.bodies())

    finished = next(e for e in await store.read_log("t") if e.type == "ToolFinished")
    assert PASSED["DB_PASS"] in str(finished.data)  # the command did print them
    tool = next(s for s in spans if s.name == "execute_tool Bash")
    result = tool.attributes["gen_ai.tool.call.result"]
    assert isinstance(result, str) and result.count("[redacted]") == len(PASSED) + 1
    assert SHORT in result  # left alone, and the worker said so at start-up:
    log = worker.log()
    assert "pass_env SHORT_ONE: its value is under 8 characters" in log
    for value in [*PASSED.values(), GITHUB_KEY]:
        assert value.encode() not in exported
        assert value not in log
