"""The cost `noeta show` says equals the bill computed independently from the provider
fake's own records, across a real SIGKILL between ModelCalled and ModelReplied and a
takeover that sends the request again: each reply counted once, the unanswered request
once as possibly billed (its estimated input), never twice and never as 0."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from noeta.backends.stores import open_store
from noeta.config import Config
from noeta.core.ports.model import ToolCall
from noeta.core.runner.task import TaskRunner
from noeta.plugins.toolbox import Toolbox
from noeta.testing.fake_providers import FakeAnthropic, Reply, Stall

from .test_http_providers import API_KEY, Registry, provider, until
from .test_runner import Sleeps

MODEL = "anthropic:fake-model"
# USD per million tokens, by kind: set in noeta.yaml, as an operator would.
PRICES = {
    "input": Decimal(3),
    "output": Decimal(15),
    "cache_read": Decimal("0.3"),
    "cache_write": Decimal("3.75"),
}


def bill_of(replies: list[Reply]) -> Decimal:
    """What the fake's replies cost, from its own records (the wire's usage fields)."""
    tokens = Decimal(0)
    for reply in replies:
        tokens += reply.input_tokens * PRICES["input"] + reply.output_tokens * PRICES["output"]
        tokens += reply.cache_read_tokens * PRICES["cache_read"]
        tokens += reply.cache_write_tokens * PRICES["cache_write"]
    return tokens / 1_000_000


async def test_show_bills_each_reply_once_and_the_killed_request_once(
    postgres_url: str, tmp_path: Path
) -> None:
    look = ToolCall("c1", "Glob", {"pattern": "*.md"})
    config = tmp_path / "noeta.yaml"
    kinds = ", ".join(f"{kind}: {price}" for kind, price in PRICES.items())
    config.write_text(f"workspaces: {tmp_path / 'w'}\nprices:\n  {MODEL}: {{{kinds}}}\n")
    with FakeAnthropic() as server:
        server.script(
            Reply(tool_calls=(look,), input_tokens=900, output_tokens=80, cache_write_tokens=3000),
            Stall(),  # the process is killed while this request waits for its reply
            Reply(text="4", input_tokens=120, output_tokens=9, cache_read_tokens=3000),
        )
        env = {
            **os.environ,
            "NOETA_STORE": postgres_url,
            "NOETA_HOME": str(tmp_path),
            "NOETA_CONFIG": str(config),
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": server.base_url,
        }
        store = await open_store(postgres_url, migrate=True)
        run = [sys.executable, "-m", "noeta", "run", "2+2?", "--model", MODEL, "--id", "bill"]
        child = subprocess.Popen(  # noqa: ASYNC220 - killed below, never waited on blocking
            [*run, "--lease", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            await until(lambda: len(server.requests) == 2, "the second request", within=120)
            child.send_signal(signal.SIGKILL)  # dead between ModelCalled and ModelReplied
            await asyncio.to_thread(child.wait, 30)
            assert [e.type for e in await store.read_log("bill")][-1] == "ModelCalled"
            claim = None
            while claim is None:  # the dead process's lease runs out on the database clock
                claim = await store.claim_task("w2", "bill", 60)
                await asyncio.sleep(0.05)
            chosen = provider("anthropic", server.base_url)
            toolbox = await Toolbox.open(Config(workspaces=str(tmp_path / "w")))
            try:
                runner = TaskRunner(
                    store,
                    Registry(chosen),
                    toolbox.tools,
                    sleep=Sleeps(),
                    workspaces=toolbox.workspaces,
                    pins=toolbox.pins,
                )
                result = await runner.run(claim)
            finally:
                await chosen.close()
                await toolbox.close()
            assert result.state.last_answer == "4"
        finally:
            if child.poll() is None:
                child.kill()
            await store.close()
        billed = [reply for _, reply in server.billed]
        unanswered = server.requests[1]  # the one the fake never answered: 3 requests, 2 replies
    assert len(server.requests) == 3 and len(billed) == 2
    assert unanswered.body == server.requests[2].body  # re-sent byte for byte
    # The estimate's documented rule: a token per 4 bytes of the request, rounded up.
    possibly = -(-len(unanswered.body) // 4) * PRICES["input"] / 1_000_000

    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "noeta", "show", "bill"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    total = re.search(
        r"^usage \(with subtasks\): cost \$(\S+) \+ possibly billed \$(\S+)$", shown.stdout, re.M
    )
    assert total is not None, shown.stdout
    assert Decimal(total.group(1)) == bill_of(billed)
    assert Decimal(total.group(2)) == possibly.quantize(Decimal("0.000001"))
    assert "2 replies" in shown.stdout and "possibly billed: 1 request(s)" in shown.stdout
