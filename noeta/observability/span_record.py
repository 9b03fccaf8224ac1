"""The trace record a task's log carries (ADR-0024): one line in the `trace` field of
`ModelCalled` and `ToolStarted`, read back by the next claimer to continue the trace and
to account for a step a crash cut short. Pure: no OpenTelemetry here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """What a later claimer needs to continue a task's trace and to account for a step a
    crash cut short; written in the `trace` field of `ModelCalled` and `ToolStarted`.

    One line: `v1 TRACE EPOCH ROOT ATTEMPT@NS TURN@NS#N STEP@NS CALL` (ids in hex, starts
    in Unix nanoseconds on the writer's clock; CALL is empty for a model call).
    """

    trace_id: int
    epoch: int
    root: int  # the task's first attempt span: every later attempt is its child
    attempt: int
    attempt_start: int
    turn: int
    turn_start: int
    turn_number: int
    step: int
    step_start: int
    call: str = ""

    def encode(self) -> str:
        return (
            f"v1 {self.trace_id:032x} {self.epoch} {self.root:016x} "
            f"{self.attempt:016x}@{self.attempt_start} "
            f"{self.turn:016x}@{self.turn_start}#{self.turn_number} "
            f"{self.step:016x}@{self.step_start} {self.call}"
        )

    @classmethod
    def parse(cls, text: str) -> SpanRecord | None:
        """The record, or None for anything else (another version's, or damaged)."""
        parts = text.split(" ", 7)
        if len(parts) != 8 or parts[0] != "v1":
            return None
        try:
            attempt, attempt_start = parts[4].split("@")
            turn, rest = parts[5].split("@")
            turn_start, turn_number = rest.split("#")
            step, step_start = parts[6].split("@")
            return cls(
                int(parts[1], 16),
                int(parts[2]),
                int(parts[3], 16),
                int(attempt, 16),
                int(attempt_start),
                int(turn, 16),
                int(turn_start),
                int(turn_number),
                int(step, 16),
                int(step_start),
                parts[7],
            )
        except ValueError:
            return None
