"""What scrubbing streamed text on the held-back window (ADR-0114, ADR-0115) costs the reader
that shows it (`tail --follow`, `noeta web`), against scrubbing each piece alone (which
misses a secret split across two pieces): CPU a piece and a reply, and how far the shown
text lags behind what arrived.

Run:  .venv/bin/python bench/piece_scrubbing.py [--chars N] [--secret-chars N]
A reply of `--chars` characters of prose (a key in it every 5,000 characters) is fed in
pieces of 9, 64 and 1,024 characters (a delta, a flush, a big flush) to a scrubber that
knows one secret of `--secret-chars` characters (the web token: 32). Printed, not
checked: it always exits 0.
"""

from __future__ import annotations

import argparse
import time

from noeta.redaction import Scrubber, ScrubWindow

WORDS = "the reply of a model streams word by word to whoever follows its task; "


def reply(chars: int) -> str:
    text, key = "", "sk-ant-" + "a1B2c3D4e5" * 4
    while len(text) < chars:
        text += WORDS * 60 + f" here is {key} again. "
    return text[:chars]


def run(text: str, size: int, scrub: Scrubber, carried: bool) -> tuple[float, int, float]:
    """CPU seconds for the whole reply, pieces fed, and the mean characters held back."""
    pieces = [text[n : n + size] for n in range(0, len(text), size)]
    window = ScrubWindow(scrub)
    held = 0
    start = time.process_time()
    for piece in pieces:
        if carried:
            window.take(piece)
            held += len(window.held)  # what arrived and is not shown yet
        else:
            scrub(piece)
    if carried:
        window.take("", release=True)
    return time.process_time() - start, len(pieces), held / len(pieces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=200_000)
    parser.add_argument("--secret-chars", type=int, default=32)
    options = parser.parse_args()
    scrub = Scrubber()
    scrub.add("s" * options.secret_chars)
    text = reply(options.chars)
    print(f"a reply of {len(text):,} characters, one known secret of {options.secret_chars}")
    print(f"{'piece':>6} {'pieces':>7} {'alone µs/piece':>15} {'window µs/piece':>16} "
          f"{'window ms/reply':>16} {'held back, mean':>16}")  # fmt: skip
    for size in (9, 64, 1024):
        alone, count, _ = run(text, size, scrub, carried=False)
        carried, _, held = run(text, size, scrub, carried=True)
        print(f"{size:>6} {count:>7,} {alone / count * 1e6:>15.1f} "
              f"{carried / count * 1e6:>16.1f} {carried * 1e3:>16.1f} {held:>16.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
