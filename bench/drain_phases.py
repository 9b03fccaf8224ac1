"""Where an agent drain's generation spends its time, from the lines
bench/drain_phases/sitecustomize.py records in the worker (`bench/job_profile.py --agent
--phases`). A generation, in phase (ADR-0140): a claim of every slot; the runs' first
Python, to their `ModelCalled` round; that round; the model step, to their finishes'
round; that round, with the next claim sent beside it. Only generations whose claim and
rounds each carried every slot are read (a drain's first and last, and a split, are not)."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import NamedTuple


class Span(NamedTuple):
    kind: str  # claim, round, run
    began: float
    ended: float
    size: int  # a claim's tasks, a round's writes
    finishes: int  # a round's finishes


def spans(text: str) -> list[Span]:
    found = []
    for line in text.splitlines():
        kind, began, ended, *rest = line.split()
        if kind == "claim":  # slots asked, tasks got
            found.append(Span(kind, float(began), float(ended), int(rest[1]), 0))
        elif kind == "round":
            found.append(Span(kind, float(began), float(ended), int(rest[0]), int(rest[1])))
    return sorted(found, key=lambda span: span.began)


PARTS = [
    ("claim's rows to the ModelCalled round (the runs' first Python)", "first"),
    ("the ModelCalled round", "called"),
    ("its commit to the finishes' round (the model step)", "step"),
    ("the finishes' round", "finish"),
    ("the next claim's rows after that round's commit", "late"),
]


def generations(found: Sequence[Span], slots: int) -> list[dict[str, float]]:
    claims = [s for s in found if s.kind == "claim" and s.size == slots]
    rounds = [s for s in found if s.kind == "round" and s.size == slots]
    measured = []
    for claim, following in itertools.pairwise(claims):
        called = next((r for r in rounds if r.began > claim.ended and not r.finishes), None)
        if called is None or called.began > following.began:
            continue
        finish = next((r for r in rounds if r.began > called.ended), None)
        if finish is None or finish.finishes != slots or finish.began > following.began:
            continue
        measured.append(
            {
                "first": called.began - claim.ended,
                "called": called.ended - called.began,
                "step": finish.began - called.ended,
                "finish": finish.ended - finish.began,
                "late": following.ended - finish.ended,
                "claim": following.ended - following.began,
                "generation": following.ended - claim.ended,
            }
        )
    return measured


def report(text: str, slots: int) -> None:
    measured = generations(spans(text), slots)
    if not measured:
        print("\nno generation in phase to read")
        return

    def ms(key: str) -> float:
        return statistics.median(g[key] for g in measured) * 1e3

    whole = ms("generation")
    print(f"\na generation of {slots} in phase, medians of {len(measured)} (ms, share):")
    for label, key in PARTS:
        print(f"  {ms(key):6.3f}  {ms(key) / whole:5.0%}  {label}")
    print(f"  {whole:6.3f}  100%  the generation, claim's rows to the next claim's")
    print(f"  ({ms('claim'):.3f} ms the next claim, its statement to its rows)")
