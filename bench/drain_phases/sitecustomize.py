"""Loaded at start-up by the worker of `bench/job_profile.py --phases` (this folder is put
first on its PYTHONPATH), and only there: it records when each claim, each group-commit
round and each run began and ended, to the file NOETA_BENCH_PHASES names (one line each,
written when the worker exits), so that the bench can say where an agent drain's
generation spends its time. Nothing else of the worker changes; unset, it does nothing."""

from __future__ import annotations

import os

_PHASES = os.environ.get("NOETA_BENCH_PHASES")

if _PHASES:
    import atexit
    import time

    from noeta.backends.stores.postgres import group_commit
    from noeta.worker import worker

    _lines: list[str] = []
    _now = time.perf_counter
    atexit.register(lambda: open(_PHASES, "w").write("\n".join(_lines)))  # noqa: SIM115

    _claim = worker.Worker._claim

    async def _timed_claim(self, slots):  # type: ignore[no-untyped-def]
        began = _now()
        got = await _claim(self, slots)
        _lines.append(f"claim {began:.6f} {_now():.6f} {slots} {got}")
        return got

    _send = group_commit.GroupCommit._send

    async def _timed_send(self, batch, claim=None):  # type: ignore[no-untyped-def]
        began = _now()
        finishes = sum(1 for item, _ in batch if item.status)
        try:
            return await _send(self, batch, claim)
        finally:
            _lines.append(f"round {began:.6f} {_now():.6f} {len(batch)} {finishes}")

    _run = worker.Worker._run_claim

    async def _timed_run(self, claim, loaded=None):  # type: ignore[no-untyped-def]
        began = _now()
        try:
            return await _run(self, claim, loaded)
        finally:
            _lines.append(f"run {began:.6f} {_now():.6f}")

    worker.Worker._claim = _timed_claim  # type: ignore[method-assign]
    group_commit.GroupCommit._send = _timed_send  # type: ignore[method-assign]
    worker.Worker._run_claim = _timed_run  # type: ignore[method-assign]
