"""The program a sync `@noeta.tool` function with a time limit (hard or soft) runs in, one
process per attempt (noeta/plugins/function_process.py starts it): it imports the function's module
by name, reads the input as JSON on stdin and writes READY, then the return value (or the
exception, pickled) on stdout. What the function prints goes to stderr: stdout is the reply's.
A `soft_time_limit` is SIGALRM's, in this process's main thread, where the call runs."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import ctypes.util
import importlib
import json
import os
import pickle
import signal
import sys

from noeta.core.ports.tool import ToolContext


def _main() -> None:
    from noeta.cli.nondumpable import make_non_dumpable

    # Its environment holds the worker's secrets, as the worker's does (the function may
    # need them); exec made it dumpable again, so before the job's module is imported.
    make_non_dumpable()
    from noeta.plugins.function_process import READY
    from noeta.plugins.function_tools import REGISTERED, call_with_context
    from noeta.plugins.soft_limits import arm_in_this_process, disarm_in_this_process

    request = json.load(sys.stdin)
    if not _dies_with(request["parent"]):
        sys.exit(1)  # the worker is gone already: nobody would read the reply
    ctx = ToolContext(**request["ctx"])
    reply_to = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            importlib.import_module(request["module"])
            tool = REGISTERED[request["name"]]
            reply_to.write(READY.decode())  # the limits count from here
            reply_to.flush()
            if request["soft_limit"] is not None:
                arm_in_this_process(request["soft_limit"])  # counted from the call
            try:
                value = call_with_context(tool.function, request["input"], ctx)
            finally:
                disarm_in_this_process()
        reply = json.dumps({"value": value}, ensure_ascii=False, allow_nan=False)
    except Exception as error:
        try:
            pickled = pickle.dumps(error)
        except Exception:
            pickled = pickle.dumps(RuntimeError(f"{type(error).__name__}: {error}"))
        reply = json.dumps({"error": base64.b64encode(pickled).decode()})
    reply_to.write(reply)


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _dies_with(parent: int) -> bool:
    """SIGKILL this process when the worker that started it dies (a SIGKILL, a crash):
    left running, it would overlap the attempt the next claimer makes after recovery.
    False if the worker is gone already (this process was handed to another parent)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    return os.getppid() == parent  # checked after: the worker may have died before


if __name__ == "__main__":
    _main()
