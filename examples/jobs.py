"""Plain jobs (docs/api.md): functions a worker runs under the tool recovery contract,
and a model may call as tools. Run a worker with them:

    noeta worker --config examples/app/noeta.yaml      # from the repository's root

- `make_thumbnail` is retry_safe: running it again gives the same file, so a run cut off
  by a crash is simply run again (at most three starts).
- `send_receipt` is not: a receipt must not go out twice. Its `recover` asks the outbox
  (here a file; in life the mail provider's API, keyed the same way) whether the run that
  was cut off sent it; if so that is the result, else the job fails "outcome unknown".
- `count_words`, `add_up` and `scale` are the members of examples/canvas.py's chain and
  chord: the same result every run, so retry_safe.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import noeta


def outbox() -> Path:
    return Path(os.environ.get("EXAMPLES_OUTBOX", "outbox.jsonl"))


@noeta.tool(retry_safe=True, max_attempts=3, retry_on=(OSError,), time_limit=60)
def make_thumbnail(path: str, width: int = 128) -> dict[str, object]:
    """Write a thumbnail of the file at `path`, `width` pixels wide (here: a stand-in)."""
    source = Path(path)
    target = source.with_name(f"{source.stem}.w{width}{source.suffix}")
    target.write_bytes(source.read_bytes()[: width * 16])  # the same bytes every run
    return {"thumbnail": str(target), "width": width}


def find_receipt(order: str, cents: int, ctx: noeta.ToolContext) -> dict[str, object] | None:
    """Did the interrupted run send it? The outbox is keyed by the idempotency key."""
    if not outbox().exists():
        return None
    for line in outbox().read_text().splitlines():
        sent = json.loads(line)
        if sent["key"] == ctx.idempotency_key:
            return {"sent": sent["order"], "found_by_recover": True}
    return None


@noeta.tool(recover=find_receipt)
def send_receipt(order: str, cents: int, ctx: noeta.ToolContext) -> dict[str, object]:
    """Email the receipt of an order, once."""
    with outbox().open("a") as file:
        file.write(json.dumps({"key": ctx.idempotency_key, "order": order, "cents": cents}))
        file.write("\n")
    return {"sent": order, "found_by_recover": False}


@noeta.tool(retry_safe=True)
def count_words(text: str) -> int:
    """How many words `text` has."""
    return len(text.split())


@noeta.tool(retry_safe=True)
def add_up(counts: list[int]) -> int:
    """A chord's callback: the sum of its header's results."""
    return sum(counts)


@noeta.tool(retry_safe=True)
def scale(count: int, factor: int) -> int:
    """In a chain, `count` is the previous member's result."""
    return count * factor
