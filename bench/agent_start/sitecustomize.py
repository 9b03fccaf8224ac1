"""Loaded at start-up by the agent worker of bench/peers.py's idle pickup (this folder is put
first on its PYTHONPATH), and only there: the scripted model appends the moment a request is
sent to it ("0 t_send") to the file NOETA_BENCH_STARTS names, so that an agent task's pickup
is timed to its model request, the moment its work starts, as a peer's no-op is timed to its
function's start. Nothing else of the worker changes; unset, it does nothing."""

from __future__ import annotations

import os

_STARTS = os.environ.get("NOETA_BENCH_STARTS")

if _STARTS:
    import time

    from noeta.backends.models import scripted

    _fd = os.open(_STARTS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _send = scripted.ScriptedProvider.send

    async def _timed_send(self, body, on_delta=None):  # type: ignore[no-untyped-def]
        os.write(_fd, f"0 {time.time()!r}\n".encode())
        return await _send(self, body, on_delta)

    scripted.ScriptedProvider.send = _timed_send  # type: ignore[method-assign]
