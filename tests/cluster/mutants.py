"""The cluster checks can fail: deliberate faults in a copy of the store's SQL, applied one
at a time, each of which a cluster run must catch (`make cluster-mutants`).

A mutant takes one function's file, queue/postgres/functions/<name>.sql (its current
definition, as CREATE OR REPLACE), changes one exact fragment (which must occur exactly
once, so a mutant can never silently be the original), and re-creates the function on the
run's schema after migrating. Its run stops at the first problem a finished task shows
(early_stop.py), and must show the problem the mutant exists for (`shows`): a stall alone,
or another mutant's symptom, does not catch it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

FUNCTIONS = Path(__file__).parents[2] / "queue" / "postgres" / "functions"


@dataclass(frozen=True)
class Mutant:
    function: str
    original: str
    mutated: str
    why: str
    # What a run under it must show (a problem's words): caught for the reason it exists,
    # not only for a task a stall left unfinished.
    shows: tuple[str, ...]


MUTANTS = {
    "no-expected-seq": Mutant(
        "noeta_fence",
        "    IF t.last_seq <> p_expected_seq THEN",
        "    IF false THEN",
        "the append without its expected_seq check",
        ("seqs are not 1..n",),  # the stale view's append lands past the log's end
    ),
    "no-epoch-check": Mutant(
        "noeta_fence",
        "    IF t.owner_epoch <> p_epoch THEN",
        "    IF false THEN",
        "the fence without its epoch check",
        ("a stale owner's append landed",),  # the fence window's first, lone append
    ),
    "batch-no-epoch-check": Mutant(
        "noeta_append_batch",
        " AND held.owner_epoch = u.epoch\n",
        "\n",
        "the group commit's batch without one row's epoch check",
        ("a stale owner's append landed",),  # the fence window's pair, one batch
    ),
    "batch-no-expected-seq": Mutant(
        "noeta_append_batch",
        "           AND held.last_seq = u.expected_seq\n",
        "",
        "the group commit's batch without one row's expected_seq check",
        ("seqs are not 1..n",),  # the stale view's pair, one batch
    ),
    "delivery-not-taken": Mutant(
        "noeta_append",
        "    IF cardinality(p_take) > 0 THEN",
        "    IF false THEN",
        "a message delivered to the log without its take in the inbox",
        ("inbox marks", "inbox entry", "taken 2 times"),  # the log takes; the inbox does not
    ),
}


def mutated_sql(name: str) -> str:
    """The mutant's function, as CREATE OR REPLACE, from a copy of its file."""
    mutant = MUTANTS[name]
    path = FUNCTIONS / f"{mutant.function}.sql"
    if not path.is_file():
        raise LookupError(f"mutant {name}: no file {path}")
    definition = path.read_text(encoding="utf-8")
    if definition.count(mutant.original) != 1:
        raise LookupError(f"mutant {name}: {mutant.original.strip()!r} is not in it once")
    return definition.replace(mutant.original, mutant.mutated)


def apply_mutant(url: str, name: str) -> None:
    if name not in MUTANTS:
        raise SystemExit(f"make cluster: no mutant {name!r}; there are {', '.join(MUTANTS)}")
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(mutated_sql(name).encode())


def _a_stall(problem: str) -> bool:
    """A problem that says only that a task was slow: a stalled mutant, or a loaded machine."""
    return any(said in problem for said in (" within ", "not finished", "ended running"))


def main() -> None:
    """Run a short cluster under each mutant; exit 0 only if every one was caught for its
    reason. A mutant run stops at its first final problem (early_stop.py)."""
    escaped = []
    for name, mutant in MUTANTS.items():
        env = {**os.environ, "NOETA_CLUSTER_MUTANT": name}
        env.setdefault("NOETA_CLUSTER_SECONDS", "25")
        env.setdefault("NOETA_CLUSTER_TASKS", "10")
        # A mutant's task may stall: short bounds, since a stall alone does not catch it.
        env.setdefault("NOETA_CLUSTER_FINISH_WITHIN", "20")
        env.setdefault("NOETA_CLUSTER_SCENARIO_WITHIN", "20")
        print(f"== mutant {name}: {mutant.why}", flush=True)
        started = time.monotonic()
        command = [sys.executable, "-m", "tests.cluster.run"]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        took = time.monotonic() - started
        # Caught: the checks found what the log, the rows or the inbox show, not only a task
        # too slow to finish (nor the minimum chaos unmet), and what this mutant must show.
        listed = result.stdout.partition(" problem(s)\n")[2].splitlines()
        problems = [line for line in listed if line.startswith("  ")]
        shown = [line for line in problems if not _a_stall(line)]
        reasons = [line for line in shown if any(said in line for said in mutant.shows)]
        if result.returncode != 0 and reasons:
            print(f"   caught in {took:.0f} s: {len(shown)} problem(s) beyond a stall, e.g.")
            for line in [*reasons[:2], *[each for each in shown if each not in reasons][:2]]:
                print(f"   {line.strip()}")
        else:
            escaped.append(name)
            print(f"   NOT CAUGHT for its reason ({' or '.join(map(repr, mutant.shows))}) in")
            print(f"   {took:.0f} s (exit {result.returncode})")
            print(result.stdout[-2000:] + result.stderr[-2000:])
    if escaped:
        sys.exit(f"cluster-mutants: not caught: {', '.join(escaped)}")
    print(f"cluster-mutants: all {len(MUTANTS)} mutants caught")


if __name__ == "__main__":
    main()
