"""The cluster run's count of takeovers no fault explains (takeovers.py): a lapse while
the run left its worker alone is counted; one after a fault on its worker, on its task or
on every worker is not; a lapsed claim no worker logged is not counted."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.takeovers import ClaimLine, claims, unexplained

T = 1_000_000.0


def claim(worker: str, at: float, verb: str, epoch: int, task: str = "t1") -> ClaimLine:
    return ClaimLine(worker, T + at, verb, task, epoch)


def test_a_lapse_no_fault_touched_is_counted() -> None:
    lines = [claim("w1", 0, "claimed", 1), claim("w2", 6, "took over", 2)]
    (found,) = unexplained(lines, [(T + 3, "SIGSTOP w3 for 2.0 s")])
    assert found.startswith("t1 epoch 1 (w1) taken over by w2")


def test_a_fault_on_the_worker_its_task_or_every_worker_explains_the_lapse() -> None:
    lines = [claim("w1", 0, "claimed", 1), claim("w2", 6, "took over", 2)]
    for fault in (
        "SIGSTOP w1 for 2.0 s",
        "w1, w3: an append cut after it was sent",
        "t1: worker killed inside its tool call (failpoint)",
        "pg_terminate_backend: 3 worker backends",
        "PostgreSQL restart, fast mode",
        "SIGKILL every worker, restart them",
    ):
        assert unexplained(lines, [(T + 3, fault)]) == [], fault
    # Not a name inside another: w1 is not w10; nor a fault after the takeover.
    assert unexplained(lines, [(T + 3, "SIGSTOP w10 for 2.0 s")]) != []
    assert unexplained(lines, [(T + 7, "SIGSTOP w1 for 2.0 s")]) != []


def test_a_lapsed_claim_no_worker_logged_is_not_counted() -> None:
    assert unexplained([claim("w2", 6, "took over", 2)], []) == []


def test_the_claims_are_read_from_each_workers_log(tmp_path: Path) -> None:
    (tmp_path / "w1.log").write_text(
        "2026-12-01 10:00:00,100 INFO noeta.worker: claimed task t1 (epoch 1)\n"
        "2026-12-01 10:00:01,000 WARNING noeta.worker: something else\n"
    )
    (tmp_path / "w2.log").write_text(
        "2026-12-01 10:00:05,000 INFO noeta.worker: took over task t1 (epoch 2)\n"
    )
    lines = claims(sorted(tmp_path.glob("*.log")))
    assert [(line.worker, line.verb, line.epoch) for line in lines] == [
        ("w1", "claimed", 1),
        ("w2", "took over", 2),
    ]
    assert round(lines[1].at - lines[0].at, 1) == 4.9
