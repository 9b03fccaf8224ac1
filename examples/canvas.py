"""A canvas of jobs the way a Celery user writes one (docs/api.md, "Canvas"): a chord
counts the words of each text at once and adds them up once; a chain hands each result
to the next job. Each is one durable task whose members are its subtasks (ADR-0104).

From the repository's root, with a store the worker and this program share:

    export NOETA_STORE=postgresql://…          # or sqlite:///noeta.db; none: embedded
    noeta worker --config examples/app/noeta.yaml &
    python -m examples.canvas
"""

from __future__ import annotations

import noeta
from examples.jobs import add_up, count_words, scale

TEXTS = ["the quick brown fox", "jumps over", "the lazy dog"]


def main() -> None:
    counts = [count_words.s(text) for text in TEXTS]  # type: ignore[attr-defined]
    total = noeta.chord(noeta.group(counts), add_up.s()).delay()  # type: ignore[attr-defined]
    # count_words("jumps over") -> scale(2, 10) -> scale(20, 3)
    steps = noeta.chain(count_words.s("jumps over"), scale.s(10), scale.s(3))  # type: ignore[attr-defined]
    scaled = steps.delay()
    print(f"words: {total.get(timeout=120)}")
    print(f"scaled: {scaled.get(timeout=120)}")
    with noeta.Client() as client:  # `noeta show ID` prints the same tree
        for description, member in client.children(total):
            print(f"  {member.id}  {description}  {member.status.value}")


if __name__ == "__main__":
    main()
