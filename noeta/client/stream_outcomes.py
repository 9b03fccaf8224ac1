"""How a streamed call ended, as the log says (ADR-0105, ADR-0114): a reply, a failure, a
tool's result, a call cut by a crash, a background job's end; and what a reader is told
of it."""

from __future__ import annotations

from dataclasses import dataclass

from noeta.client.stream_items import StreamFinal, StreamLost, reply_text
from noeta.core.ports.reply_streams import Cursor
from noeta.core.ports.store import StoredEvent
from noeta.core.rules import events

JOB_ENDS = ("JobFinished", "JobLost", "JobStopped")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the call at a ModelCalled's (or ToolStarted's) seq ended, from the log: its
    reply, failure or result (`event_seq`; `lost`: a tool call settled as cut, outcome
    unknown), or the call sent or run again (`next_call`); None of these: not yet."""

    event_seq: int = 0
    event_type: str = ""
    text: str = ""
    next_call: int = 0
    call_id: str = ""
    lost: bool = False

    def item(self, cursor: Cursor, call_seq: int) -> StreamFinal | StreamLost:
        """What a reader is told of it: final, or lost."""
        if self.lost:
            return StreamLost(self.call_id, call_seq, self.event_seq, cursor)
        kind = self.event_type or ("ToolFinished" if self.call_id else "ModelReplied")
        return StreamFinal(self.event_seq, kind, self.text, cursor, self.call_id)


def outcome_in(log: list[StoredEvent], call_seq: int) -> Outcome | None:
    """How the call opened at `call_seq` ended, in the log from there on (None: not yet)."""
    if not log or log[0].seq != call_seq:
        return None
    opened, rest = log[0], log[1:]
    if opened.type == "ToolStarted" and isinstance(opened.data, dict):
        call_id = str(opened.data.get("call_id"))
        for stored in rest:
            data = stored.data if isinstance(stored.data, dict) else {}
            if data.get("call_id") != call_id:
                continue
            if stored.type == "ToolFinished":
                lost = data.get("recovery") == "unknown"
                text = str(data.get("content") or "")
                return Outcome(stored.seq, stored.type, text, call_id=call_id, lost=lost)
            if stored.type == "ToolStarted":
                return Outcome(next_call=stored.seq, call_id=call_id)
        return None
    for stored in rest:
        if stored.type in ("ModelReplied", "ModelFailed"):
            event = events.decode(stored.type, stored.data)
            return Outcome(stored.seq, stored.type, reply_text(event))
        if stored.type == "ModelCalled":
            return Outcome(next_call=stored.seq)
    return None


def job_end(stored: StoredEvent) -> Outcome | None:
    """A background job's end, if `stored` is one: its result (`JobFinished`, text its
    output), its worker gone (`JobLost`: lost), or stopped with its task (`JobStopped`)."""
    if stored.type not in JOB_ENDS or not isinstance(stored.data, dict):
        return None
    job_id = str(stored.data.get("job_id"))
    output = str(stored.data.get("output") or "")
    return Outcome(stored.seq, stored.type, output, call_id=job_id, lost=stored.type == "JobLost")
