"""The program a sync `@noeta.tool` function with a time limit (hard or soft) runs in, one
process per attempt (noeta/plugins/function_process.py starts it): it imports the function's module
by name, reads the input as JSON on stdin and writes the return value (or the exception,
pickled) on stdout. What the function prints goes to stderr: stdout is the reply's.
A `soft_time_limit` is SIGALRM's, in this process's main thread, where the call runs."""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import pickle
import sys

from noeta.core.ports.tool import ToolContext


def _main() -> None:
    from noeta.cli.nondumpable import make_non_dumpable

    # Its environment holds the worker's secrets, as the worker's does (the function may
    # need them); exec made it dumpable again, so before the job's module is imported.
    make_non_dumpable()
    from noeta.plugins.function_tools import REGISTERED, call_with_context
    from noeta.plugins.soft_limits import arm_in_this_process, disarm_in_this_process

    request = json.load(sys.stdin)
    ctx = ToolContext(**request["ctx"])
    try:
        with contextlib.redirect_stdout(sys.stderr):
            importlib.import_module(request["module"])
            tool = REGISTERED[request["name"]]
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
    sys.stdout.write(reply)


if __name__ == "__main__":
    _main()
