"""Plain jobs the way a Celery user writes them (README, "Plain jobs"), on two workers.

From the repository's root, with a store both workers and this program share:

    export NOETA_STORE=postgresql://…          # or sqlite:///noeta.db; none: embedded
    noeta worker --config examples/app/noeta.yaml --name w1 &
    noeta worker --config examples/app/noeta.yaml --name w2 &
    python -m examples.celery_style picture.png

`delay` and `apply_async` enqueue through the default Client (NOETA_STORE); a handle's
`get()` waits for the result like Celery's `AsyncResult.get`. `enqueue_many` writes a
whole batch in one statement, every input checked first, all or nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import noeta
from examples.jobs import make_thumbnail


def main(picture: Path) -> None:
    small = make_thumbnail.delay(path=str(picture), width=4)  # type: ignore[attr-defined]
    urgent = make_thumbnail.apply_async(  # type: ignore[attr-defined]
        kwargs={"path": str(picture), "width": 8}, priority=9, countdown=0
    )
    with noeta.Client() as client:
        inputs = [{"path": str(picture), "width": width} for width in (16, 32, 64)]
        batch = client.enqueue_many("make_thumbnail", inputs)
        for handle in [small, urgent, *batch]:
            made = handle.get(timeout=120)
            print(f"{handle.id}: {json.dumps(made)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
