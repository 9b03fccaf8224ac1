"""A running task's live stream carries the model's reply as it streams (issue 34): its
text in `reply` events, escaped by being text (a `<script>` in a delta arrives as the
characters it is), scrubbed on the held-back window (a secret split across two chunks
never shows, even half), then the final with the log's reply. In process, on one store:
the chunks written through the store's port as a worker's stream writer writes them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg

from noeta.client import AsyncClient
from noeta.client.stream_items import StreamFinished
from noeta.core.ports.model import Text, Usage
from noeta.core.ports.reply_streams import Chunk, ReplyStreams
from noeta.core.ports.store import Finish, Store
from noeta.core.rules import events
from noeta.plugins.core import Bash
from noeta.redaction import REDACTED
from noeta.web import live
from noeta.web.render import forget_secret
from noeta.web.site import Site
from tests.client.test_tool_output_stream import Run
from tests.web.conftest import encoded, task_with_log

SECRET = "pw-for-the-web-stream-3141"
BEFORE = "Look: <script>alert('owned')</script> and the password is "
AFTER = ", which I will not repeat; some more words so the window moves past it."
REPLY = BEFORE + SECRET + AFTER
HALF = len(BEFORE) + len(SECRET) // 2  # the first chunk ends in the secret's middle


def streams(store: Store) -> ReplyStreams:
    port = store.capabilities.reply_streams
    assert port is not None
    return port


async def next_event(stream: AsyncIterator[str], wanted: str) -> list[tuple[str, str]]:
    """The events up to and including the first named `wanted` (comments skipped)."""
    seen: list[tuple[str, str]] = []
    while not seen or seen[-1][0] != wanted:
        text = await anext(stream)
        if text.startswith(":"):
            continue
        lines = text.strip("\n").split("\n")
        data = "\n".join(line.removeprefix("data: ") for line in lines[1:])
        seen.append((lines[0].removeprefix("event: "), data))
    return seen


@contextlib.asynccontextmanager
async def page_stream(url: str, task_id: str) -> AsyncIterator[AsyncIterator[str]]:
    """The live stream of a page showing the task's log after its second event (the
    ModelCalled), once it follows the task."""
    client = AsyncClient(url, start_embedded=False)
    feed = live.LiveFeed(Site(client))
    stream = live._stream(feed._site, feed, task_id, 2)
    try:
        assert await anext(stream) == ": following\n\n"
        yield stream
    finally:
        await stream.aclose()
        await feed.close()
        await client.close()


def replies(seen: list[tuple[str, str]]) -> list[dict[str, object]]:
    return [json.loads(data) for name, data in seen if name == "reply"]


async def test_the_reply_grows_escaped_and_scrubbed_then_the_logs_reply_replaces_it(
    postgres_url: str, store: Store
) -> None:
    forget_secret(SECRET)  # as the web process knows its environment's secrets
    claim = await task_with_log(store, "grows", [events.ModelCalled("0" * 64)])
    call = 2
    async with page_stream(postgres_url, "grows") as stream:
        port = streams(store)
        first = Chunk(call, 1, 1, "text", 0, 0, REPLY[:HALF])
        await port.write_chunks("grows", [first], first=True)
        second = Chunk(call, 1, 2, "text", 0, HALF, REPLY[HALF:])
        await port.write_chunks("grows", [second], first=False)
        replied = events.ModelReplied((Text(REPLY),), "end_turn", Usage(10, 20))
        await store.append(claim, 2, encoded(replied))
        await port.write_chunks("grows", [Chunk(call, 1, 3, "final", 0, 0, "3")], first=False)
        seen: list[dict[str, object]] = []
        while not seen or seen[-1]["kind"] != "final":  # each row read is an item: in order
            seen += replies(await next_event(stream, "reply"))
        await store.append(
            claim, 3, encoded(events.TaskFinished("done", "ok")), next_state=Finish()
        )
        rest = await next_event(stream, "finished")

    texts = [str(reply["text"]) for reply in seen if reply["kind"] == "text"]
    grown = "".join(texts)
    assert (BEFORE + REDACTED).startswith(grown) or grown.startswith(BEFORE + REDACTED)
    assert all(SECRET[: len(SECRET) // 2] not in text for text in texts)
    assert SECRET not in grown and SECRET not in json.dumps(seen)
    assert seen[-1] == {"kind": "final", "seq": 3, "text": BEFORE + REDACTED + AFTER}
    assert [name for name, _ in rest][-1] == "finished"
    assert SECRET not in "".join(data for _, data in rest)


DEAD = "Words of an attempt that the provider's retry makes void. " * 8


async def test_a_retried_attempt_is_marked_restarted_on_the_page(
    postgres_url: str, store: Store
) -> None:
    """The provider's attempt 2 of the same call (its rows replace attempt 1's): the page
    is told the text so far is void, in the words `tail --follow` prints, then the new
    text. What the page does not show (the task's finish) gives no reply event."""
    await task_with_log(store, "again", [events.ModelCalled("0" * 64)])
    async with page_stream(postgres_url, "again") as stream:
        port = streams(store)
        dead = Chunk(2, 1, 1, "text", 0, 0, DEAD)
        await port.write_chunks("again", [dead], first=True)
        seen = replies(await next_event(stream, "reply"))  # longer than what is held back
        await port.write_chunks("again", [Chunk(2, 2, 1, "text", 0, 0, "New words. ")], first=True)
        while not any(reply["kind"] == "restarted" for reply in seen):
            seen += replies(await next_event(stream, "reply"))
    marker = next(reply for reply in seen if reply["kind"] == "restarted")
    assert marker["words"] == "↺ the text above is void: sent again (call 2, attempt 2)"
    assert "".join(str(reply["text"]) for reply in seen[: seen.index(marker) + 1]) == DEAD
    assert live.reply_stream.PageReply().event(StreamFinished("done")) is None


async def test_a_row_of_a_kind_the_page_does_not_show_yet_is_passed_over(
    postgres_url: str, store: Store
) -> None:
    """A tool call's arguments streamed in the reply's stream (a kind ADR-0105 plans and
    a later migration allows; here the CHECK is widened as it would widen it): the page
    shows the text around it and nothing of it."""
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute("ALTER TABLE stream_chunks DROP CONSTRAINT stream_chunks_kind_check")
    await task_with_log(store, "kinds", [events.ModelCalled("0" * 64)])
    first, later = DEAD, " And the text goes on after the tool's arguments. " * 8
    arguments = '{"command": "<b>rm -rf</b> /"}'
    rows = [
        Chunk(2, 1, 1, "text", 0, 0, first),
        Chunk(2, 1, 2, "tool_input", 1, 0, arguments),  # type: ignore[arg-type]
        Chunk(2, 1, 3, "text", 0, len(first), later),
    ]
    async with page_stream(postgres_url, "kinds") as stream:
        await streams(store).write_chunks("kinds", rows, first=True)
        seen: list[dict[str, object]] = []
        while "after the tool's arguments" not in "".join(str(r["text"]) for r in seen):
            seen += replies(await next_event(stream, "reply"))
    assert (first + later).startswith("".join(str(reply["text"]) for reply in seen))
    assert all(reply["kind"] == "text" for reply in seen)  # no restart, no lost text


def outputs(seen: list[dict[str, object]], pipe: str) -> str:
    """A call's output as the page assembles it: its pieces, and what its end released."""
    pieces = [str(r["text"]) for r in seen if r["kind"] == "output" and r["pipe"] == pipe]
    ends = [r["held"] for r in seen if r["kind"] in ("output-final", "output-lost")]
    return "".join(pieces) + "".join(str(held.get(pipe, "")) for held in ends)  # type: ignore[attr-defined]


async def test_a_running_commands_output_shows_as_text_until_its_result_row(
    postgres_url: str, store: Store, tmp_path: Path
) -> None:
    """Bash run by a runner in this process (issue 34 item 2 on the page): its stdout and
    stderr reach the page apart, as text, before the command ends (it waits on a FIFO
    the test opens after seeing them); then the end names the log's ToolFinished row."""
    run = Run(store, tmp_path, "web-cmd", Bash())
    command = "echo '<b>step</b> one'; echo oops >&2; read word < gate; echo step two"
    running = await run.start(command)
    seen: list[dict[str, object]] = []
    async with page_stream(postgres_url, "web-cmd") as stream, asyncio.timeout(120):
        while "one\n" not in outputs(seen, "stdout") or "oops" not in outputs(seen, "stderr"):
            seen += replies(await next_event(stream, "reply"))
        before = outputs(seen, "stdout"), outputs(seen, "stderr")
        await run.open_gate()
        # To the task's end: the page then has every row of the log, so the stream may
        # end before the call's own end comes (the runner finishes the task at once).
        seen += replies(await next_event(stream, "finished"))
    await running
    seq, content = await run.result()
    assert before == ("<b>step</b> one\n", "oops\n")
    assert "<b>step</b> one\nstep two\n".startswith(outputs(seen, "stdout"))
    ends = [r for r in seen if r["kind"] == "output-final"]
    assert all((end["call"], end["seq"]) == ("call-1", seq) for end in ends), ends
    assert "step two" in content
