"""The folds of a one-shot agent task's run, item by item, in several checkouts in turn.

A one-shot scripted task's run folds five times: the claimed log (`TaskCreated`), its
first append (`PluginsPinned`, `ModelCalled`), and the reply's step: the reply folded to
ask whether it ends the turn, `TurnEnded` to ask whether that ends the task, and the
`TaskFinished` the append lands (`RunWriter.folded`, each fold only what the last did
not). Each item is timed in each `--tree` in turn (a subprocess with that checkout first
on `PYTHONPATH`), `--rounds` times, CPU (`time.process_time`) a call, the median of five
runs of `--calls` calls; with `--instructions`, also counted under valgrind's callgrind
(instructions a call: a run of N calls less a run of none), which the machine's load does
not move. The ratio is each tree's over the first's.

  .venv/bin/python bench/agent_folds.py --tree main=/tmp/main --tree this=. [--instructions]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ITEMS = ("claimed", "append1", "reply_step")
TITLES = {
    "claimed": "the claimed log folded (TaskCreated)",
    "append1": "append 1 folded (PluginsPinned, ModelCalled)",
    "reply_step": "the reply's step: three look-ahead folds, two next_action",
}

# Run in the checkout's own interpreter path: what `item(name)` times, built from that
# checkout's code only (nothing of this script is imported there).
ITEM_CODE = """
import statistics, sys, time
from noeta.core.ports.model import Text, Usage
from noeta.core.ports.store import Claim
from noeta.core.rules import events as ev
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import EndTurn, FinishTask, next_action
from noeta.core.runner.plugin_hooks import HookPlugins, Hooks
from noeta.core.runner.writing import RunWriter
from noeta.observability import tracing

CREATED = ev.TaskCreated("scripted:/nowhere.yaml", "go")
CLAIM = Claim("t", "w", 1, None)

def writer(state):
    return RunWriter(None, CLAIM, state, "v", Hooks(HookPlugins.of(())), 200, tracing.NO_ATTEMPT)

def claimed():
    return fold([LoggedEvent(1, CREATED)])

FRESH = claimed()

def append1():
    return writer(FRESH).folded([ev.PluginsPinned(()), ev.ModelCalled("ab" * 32, "", 12)])

CALLED = append1()

def reply_step():
    run = writer(CALLED)
    replied = ev.ModelReplied((Text("ok"),), "end_turn", Usage(5, 1))
    ending = next_action(run.folded([replied]))
    assert isinstance(ending, EndTurn)
    events = [replied, ev.TurnEnded(ending.outcome, ending.answer, ending.error)]
    finish = next_action(run.folded(events))
    assert isinstance(finish, FinishTask)
    state = run.folded([*events, ev.TaskFinished(finish.status, finish.answer)])
    assert state.finished == "done"

name, calls, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
item = globals()[name]
if mode == "count":
    for _ in range(calls):
        item()
else:
    runs = []
    for _ in range(5):
        began = time.process_time()
        for _ in range(calls):
            item()
        runs.append((time.process_time() - began) / calls * 1e6)
    print(statistics.median(runs))
"""


def run_item(tree: str, item: str, calls: int, mode: str, code: Path) -> str:
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}
    command = [sys.executable, str(code), item, str(calls), mode]
    if mode == "count":
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd="/")
    if mode == "count":
        return re.findall(r"Collected : (\d+)", done.stderr)[-1]
    return done.stdout.strip()


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--tree", action="append", required=True, help="name=checkout")
    arguments.add_argument("--rounds", type=int, default=3)
    arguments.add_argument("--calls", type=int, default=5000)
    arguments.add_argument("--instructions", action="store_true", help="count under callgrind")
    options = arguments.parse_args()
    trees = [tuple(tree.split("=", 1)) for tree in options.tree]
    if any(len(tree) != 2 for tree in trees):
        arguments.error("--tree takes name=checkout")
    code = Path(tempfile.mkdtemp(prefix="noeta-agent-folds-")) / "items.py"
    code.write_text(ITEM_CODE)
    times: dict[tuple[str, str], list[float]] = {}
    for round_ in range(options.rounds):
        order = trees if round_ % 2 == 0 else trees[::-1]  # each tree first in turn
        for name, tree in order:
            for item in ITEMS:
                us = float(run_item(tree, item, options.calls, "time", code))
                times.setdefault((name, item), []).append(us)
    counts: dict[tuple[str, str], int] = {}
    if options.instructions:
        for name, tree in trees:
            for item in ITEMS:
                none = int(run_item(tree, item, 0, "count", code))
                some = int(run_item(tree, item, 2000, "count", code))
                counts[name, item] = (some - none) // 2000
    print(f"load {os.getloadavg()[0]:.1f}; CPU a call, us, each round (median of 5 runs of "
          f"{options.calls}); ratio of medians to {trees[0][0]}")  # fmt: skip
    for item in ITEMS:
        print(f"\n{TITLES[item]}")
        base = statistics.median(times[trees[0][0], item])
        for name, _ in trees:
            each = times[name, item]
            row = f"  {name:>8}: {' / '.join(f'{us:.2f}' for us in each)} us"
            row += f"  x{statistics.median(each) / base:.2f}"
            if counts:
                ratio = counts[name, item] / counts[trees[0][0], item]
                row += f"; {counts[name, item]:,} instructions x{ratio:.2f}"
            print(row)


if __name__ == "__main__":
    main()
