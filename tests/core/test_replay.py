"""`replay` (issue 30 item 2): a log this code wrote replays clean; a log from a newer
noeta, a broken one, and one that records a step this code would not take are named, at
the seq where they part."""

from __future__ import annotations

import dataclasses

import pytest

from noeta.core.ports.store import StoredEvent
from noeta.core.rules.replay import replay
from tests.core.test_golden_logs import NAMES, read_log

# The golden logs that part from this code, and where: two are broken on purpose (a gap,
# a wake-up never scheduled), two come from a newer noeta, and three record what older
# noetas did before ADR-0080 (a model call sent again with no record of why the first
# was cut).
PARTING = {
    "gap_in_seq": "seq 4: the log jumps from seq 2 to 4",
    "newer_encoding_of_a_known_event": "seq 2: a ModelCalled event (encoding 2) this noeta "
    "does not know",
    "unknown_event_from_a_newer_version": "seq 3: a ModelThoughtHarder event",
    "model_call_cut_before_its_cause_was_recorded": "seq 3: the log records a ModelCalled "
    "where this noeta would find why the model call at seq 2 was cut",
    "model_call_open_is_found_why_cut_first": "seq 3: the log records a ModelCalled",
    "model_called_three_times_without_reply": "seq 3: the log records a ModelCalled",
    "woken_up_without_a_wakeup": "seq 3: the log records a WokenUp",
}


@pytest.mark.parametrize("name", NAMES)
def test_every_golden_log_replays_or_parts_where_expected(name: str) -> None:
    parted = replay(read_log(name))
    if name in PARTING:
        assert parted is not None and str(parted).startswith(PARTING[name]), parted
    else:
        assert parted is None, parted


def test_a_step_this_code_would_not_take_is_named() -> None:
    log = read_log("one_shot_answered")
    finished = next(i for i, e in enumerate(log) if e.type == "TaskFinished")
    # A TurnEnded dropped: the log finishes a task whose turn this code would end first.
    cut = [*log[: finished - 1], dataclasses.replace(log[finished], seq=finished)]
    assert replay(log) is None
    parted = replay(cut)
    assert parted is not None and parted.seq == finished
    after_the_end = [*log, StoredEvent("golden", len(log) + 1, "ModelCalled", log[1].data, None)]  # type: ignore[arg-type]
    parted = replay(after_the_end)
    assert parted is not None and "after the task's finish" in str(parted)


def test_an_event_this_code_cannot_read_is_named() -> None:
    log = read_log("one_shot_answered")
    broken = [*log[:1], dataclasses.replace(log[1], data={"v": 1})]
    parted = replay(broken)
    assert parted is not None and parted.seq == 2 and "cannot read it" in str(parted)
    assert str(replay([])) == "seq 0: the log is empty"
