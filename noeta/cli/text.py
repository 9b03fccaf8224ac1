"""Reading what people type (a prompt, a message: an argument or `-` for stdin), and
printing tasks and their logs, the same way for every command, scrubbed of secrets."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from noeta.core.errors import ConfigError
from noeta.core.ports.store import LateResult, Store, StoredEvent, TaskRecord
from noeta.core.ports.store_values import KEPT_REPLY_PREFIX
from noeta.core.ports.worker_registry import no_worker_offers
from noeta.log_steps import (
    Badge,
    Body,
    Line,
    Part,
    Step,
    StepContext,
    epoch_change,
    json_text,
    step_of,
)

if TYPE_CHECKING:
    from noeta.redaction import Scrubber, ScrubWindow

MAX_TEXT_CHARS = 1_000_000  # a prompt or a message; the log could hold more, a model not


def read_text(value: str, what: str, *, blank_ok: bool = False) -> str:
    """The argument itself, or standard input for `-`; refused past the prompt limit, and
    refused blank unless `blank_ok` (a blank prompt would wait for ever, and a blank
    message is refused by the providers)."""
    if value == "-":
        value = sys.stdin.read()
    if not blank_ok and not value.strip():
        raise ConfigError(f"a {what} must not be empty (or only blanks)")
    if len(value) > MAX_TEXT_CHARS:
        raise ConfigError(f"the {what} is {len(value)} characters; the limit is {MAX_TEXT_CHARS}")
    return value


def task_json(record: TaskRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "queue": record.queue,
        "status": record.status.value,
        "owner": record.owner,
        "owner_epoch": record.owner_epoch,
        "last_seq": record.last_seq,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
    }


async def unrunnable(store: Store, records: Sequence[TaskRecord]) -> Mapping[str, tuple[str, ...]]:
    """Of these tasks, the waiting ones no live worker can run, with what they need
    (ADR-0092); nothing where the store keeps no registry of workers."""
    registry = store.capabilities.workers
    waiting = [r.id for r in records if r.status.value in ("ready", "waiting")]
    if registry is None or not waiting:
        return {}
    return await registry.unrunnable(waiting)


def waiting_text(needs: tuple[str, ...] | None) -> str:
    """After a task's status: what it waits for that no live worker has."""
    return "" if needs is None else f" ({no_worker_offers(needs)})"


def waiting_json(needs: tuple[str, ...] | None) -> dict[str, Any]:
    return {} if needs is None else {"no_worker_offers": list(needs)}


@functools.cache
def _scrubber() -> Scrubber:
    from noeta.redaction import Scrubber

    scrub = Scrubber()
    scrub.add_environment()
    return scrub


def piece_scrubber() -> ScrubWindow:
    """For text that arrives in pieces: a secret split across two is caught too."""
    from noeta.redaction import ScrubWindow

    return ScrubWindow(_scrubber())


def scrubbed(value: Any) -> Any:
    """Every string in `value` (an event's data) without the secrets this process knows
    or that have a key's shape: a tool's output may hold keys this process never held.
    Scrubbed before it is cut short, so no key is shown half."""
    if isinstance(value, str):
        return _scrubber()(value)
    if isinstance(value, dict):
        return {key: scrubbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item) for item in value]
    return value


def event_json(event: StoredEvent) -> str:
    document = {
        "seq": event.seq,
        "type": event.type,
        "at": event.created_at.isoformat(),
        "data": scrubbed(event.data),
    }
    return json.dumps(document, ensure_ascii=False)


class StepPrinter:
    """A log as `noeta show` and `tail` print it: each event a step (what the web
    timeline says, `noeta.log_steps`), its values folded to their first lines, a line at
    every new claim; scrubbed of secrets. One per log: a step reads the ones before."""

    def __init__(self) -> None:
        self._context = StepContext()

    def lines(self, event: StoredEvent, *, shown: bool = True) -> list[str]:
        """The lines of `event`'s step (none if not `shown`: read for the steps after)."""
        data = scrubbed(event.data)
        changed = epoch_change(event, self._context)
        if not isinstance(data, dict):
            self._context.last_type = event.type
            step = Step("", event.type, (Body(json_text(data)),))
        else:
            step = step_of(event, data, self._context)
        if not shown:
            return []
        lines = [f"      ── {changed}"] if changed else []
        at = event.created_at.isoformat()[11:23]
        lines.append(f"{event.seq:>5}  {at}  {step.title}")
        for part in step.parts:
            lines.extend(STEP_INDENT + line for line in _part_lines(part))
        return lines


STEP_INDENT = " " * 21  # under the step's title
FOLD_LINES = 6  # a value shows its first lines; `--json` or the web view has the rest
LINE_CHARS = 200


def _part_lines(part: Part) -> list[str]:
    match part:
        case Line(before=before, task=task, after=after):
            return [f"{before}{task}{after}"]
        case Badge(text=text):
            return [f"[{text}]"]
        case Body(text=text):
            return folded_lines(text)


def folded_lines(text: str) -> list[str]:
    """A value's first lines, each cut at LINE_CHARS, and how many more there are."""
    lines = text.splitlines() or [""]
    shown = [
        line if len(line) <= LINE_CHARS else f"{line[:LINE_CHARS]}… ({len(line):,} characters)"
        for line in lines[:FOLD_LINES]
    ]
    if len(lines) > FOLD_LINES:
        shown.append(f"... {len(lines) - FOLD_LINES} more lines")
    return [f"│ {line}" for line in shown]


def late_result_fate(result: LateResult, log: list[StoredEvent]) -> str:
    """What became of a late result, read from the log: the log is the truth, the kept
    result only a hint (ADR-040)."""
    if result.call_id.startswith(KEPT_REPLY_PREFIX):
        return _kept_reply_fate(result, log)
    settled = ""
    for event in log:
        data = event.data if isinstance(event.data, dict) else {}
        if data.get("call_id") != result.call_id:
            continue
        if event.type == "ToolResultCorrected" and data.get("from_epoch") == result.epoch:
            return f"recorded as a correction at seq {event.seq}, after {settled}"
        if event.type != "ToolFinished" or settled:
            continue
        if data.get("recovery") == "late" and data.get("from_epoch") == result.epoch:
            return f"recorded at seq {event.seq}"
        how = data.get("recovery") or "recorded by its own run"
        settled = f"the call was settled at seq {event.seq} ({how})"
    if settled:
        return f"not used: {settled}"
    return "not recorded yet: the call's next claimer will record it"


def _kept_reply_fate(result: LateResult, log: list[StoredEvent]) -> str:
    """A model reply its worker kept (ADR-0082): what closed the call of its epoch."""
    called = max(
        (e.seq for e in log if e.type == "ModelCalled" and e.epoch == result.epoch), default=0
    )
    closing = ("ModelReplied", "ModelCallCut")
    closed = next((e for e in log if e.seq > called and e.type in closing), None)
    if not called or closed is None:
        return "not recorded yet: the call's next claimer will record it"
    if closed.type == "ModelReplied" and closed.epoch != result.epoch:
        return f"recorded at seq {closed.seq}"
    if closed.type == "ModelReplied":
        return f"not used: its own run recorded the reply at seq {closed.seq}"
    return f"not used: the call was found cut at seq {closed.seq} and sent again"


def late_result_json(result: LateResult, log: list[StoredEvent]) -> dict[str, Any]:
    return {
        "call_id": result.call_id,
        "epoch": result.epoch,
        "worker": result.worker,
        "is_error": result.is_error,
        "content": scrubbed(result.content),
        "kept_at": result.created_at.isoformat() if result.created_at else None,
        "fate": late_result_fate(result, log),
    }


def late_result_line(result: LateResult, log: list[StoredEvent]) -> str:
    """One late result as `noeta show` prints it, under the log."""
    text = json.dumps(scrubbed(result.content), ensure_ascii=False)
    if len(text) > 80:
        text = text[:77] + "..."
    kind = "error" if result.is_error else "result"
    where = f"epoch {result.epoch} ({result.worker})"
    return f"  {result.call_id}  {kind} from {where}: {text}; {late_result_fate(result, log)}"
