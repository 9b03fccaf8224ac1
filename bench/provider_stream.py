"""Streamed model replies (issue 34 item 1): what reading a reply as a stream costs the
worker, against the provider fakes at the wire.

The fake runs in a process of its own, so the CPU measured (this process's, user +
system) is the client's alone: the adapter, httpx and the stream parsing. For each
provider and reply shape, N replies are read three ways:
- whole:     the request without `stream` (a JSON document, as every call was before);
- streamed:  the request as sent now, no delta hook;
- hooked:    streamed, with a hook that appends each delta to a list.
It prints the CPU per reply and, for the streamed ways, the latency from the fake writing
a stream's first byte to the hook hearing its first delta (median and p90; both clocks
are CLOCK_MONOTONIC, shared by the processes).

`--tree /work/main` runs the client from another checkout (a before and after in one
run); a checkout from before streaming sends every request whole: only `whole` is read.

Run:  .venv/bin/python bench/provider_stream.py [--replies N] [--tree PATH]
It always exits 0: the figures are printed, not checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

SHAPES = {
    # ~1,000 output tokens of prose, in token-sized pieces, as a long answer streams.
    "text 4 kB": {"text": "word " * 800, "piece_chars": 4},
    # A tool call whose arguments (a file to write) stream in pieces of 8 characters.
    "tool 8 kB": {"text": None, "call_chars": 8000, "piece_chars": 8},
    # A short answer: a handful of deltas.
    "text 80 B": {
        "text": "A short answer of about eighty characters, as a quick reply may be.",
        "piece_chars": 4,
    },
}


def serve(kind: str, connection: Connection) -> None:
    """The fake, in its own process: scripts what it is told, reports its first bytes."""
    from noeta.core.ports.model import ToolCall
    from noeta.testing.fake_providers import FakeAnthropic, FakeOpenAI, Reply

    server = FakeAnthropic() if kind == "anthropic" else FakeOpenAI()
    with server:
        connection.send(server.base_url)
        while True:
            command, argument = connection.recv()
            if command == "script":
                shape, count = argument
                calls: tuple[ToolCall, ...] = ()
                if shape.get("call_chars"):
                    calls = (
                        ToolCall(
                            "call_1", "Write", {"path": "a.py", "text": "x" * shape["call_chars"]}
                        ),
                    )
                pieces = {"piece_chars": shape["piece_chars"]}
                if "piece_chars" not in Reply.__dataclass_fields__:  # a checkout before streaming
                    pieces = {}
                reply = Reply(text=shape["text"], tool_calls=calls, **pieces)
                server.script(*([reply] * count))
                connection.send(None)
            elif command == "first_bytes":
                written = getattr(server, "first_bytes", [])  # none before streaming
                connection.send(list(written))
                written.clear()
            else:
                return


async def read_replies(
    provider: Any, body: bytes, count: int, hooked: bool
) -> tuple[float, list[float]]:
    firsts: list[float] = []
    started = time.process_time()
    for _ in range(count):
        if hooked:
            heard: list[object] = []

            def hear(delta: object, heard: list[object] = heard) -> None:
                if not heard:
                    firsts.append(time.monotonic())
                heard.append(delta)

            await provider.send(body, hear)
        else:
            await provider.send(body)
    return (time.process_time() - started) / count, firsts


async def measure(kind: str, replies: int) -> None:
    from noeta.backends.models.anthropic import AnthropicProvider
    from noeta.backends.models.openai import OpenAIProvider
    from tests.backends.models.sample_requests import conversation

    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=serve, args=(kind, child))
    process.start()
    base_url = parent.recv()
    maker = AnthropicProvider if kind == "anthropic" else OpenAIProvider
    provider = maker("sk-bench", base_url=base_url)
    streamed_body = provider.encode_request(conversation())
    document = json.loads(streamed_body)
    document.pop("stream", None)
    document.pop("stream_options", None)
    whole_body = json.dumps(document, separators=(",", ":")).encode()
    whole_only = b'"stream":true' not in streamed_body  # a checkout before streaming
    try:
        for name, shape in SHAPES.items():
            rows = []
            ways = [
                ("whole", whole_body, False),
                ("streamed", streamed_body, False),
                ("hooked", streamed_body, True),
            ]
            for way, body, hooked in ways[:1] if whole_only else ways:
                parent.send(("script", (shape, replies + 5)))
                parent.recv()
                await read_replies(provider, body, 5, hooked)  # warm: connection, caches
                parent.send(("first_bytes", None))
                parent.recv()
                cpu, firsts = await read_replies(provider, body, replies, hooked)
                parent.send(("first_bytes", None))
                written: list[float] = parent.recv()
                latency = ""
                if hooked and len(written) == len(firsts):
                    gaps = sorted(
                        (heard - wrote) * 1000 for wrote, heard in zip(written, firsts, strict=True)
                    )
                    p90 = gaps[int(len(gaps) * 0.9)]
                    latency = f"{statistics.median(gaps):7.2f} ms median, {p90:6.2f} ms p90"
                rows.append(f"  {name:10} {way:9} {cpu * 1e6:9.0f} µs CPU per reply  {latency}")
            print("\n".join(rows))
    finally:
        await provider.close()
        parent.send(("stop", None))
        process.join(timeout=10)


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--replies", type=int, default=200)
    arguments.add_argument("--tree", help="the checkout whose noeta the client runs")
    options = arguments.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)  # tests.backends.models.sample_requests
    if options.tree:
        sys.path.insert(0, os.path.abspath(options.tree))
    import noeta

    print(f"noeta from {os.path.dirname(noeta.__file__)}; load {os.getloadavg()[0]:.2f}")
    for kind in ("anthropic", "openai"):
        print(kind)
        asyncio.run(measure(kind, options.replies))


if __name__ == "__main__":
    main()
