"""Text scrubbed as it arrives in pieces (a streamed reply, issue 34): a secret split
across two pieces is caught, however the text is cut, and nothing is shown twice or lost."""

from __future__ import annotations

import pytest

from noeta.redaction import REDACTED, Scrubber, ScrubWindow

SECRET = "hunter2-of-the-store-42"
KEY = "sk-ant-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3"
PASSPHRASE = "correct horse battery staple"  # a secret with spaces (pass_env)
TEXTS = [
    f"The password is {SECRET}, keep it.",
    f"A key {KEY} in a sentence.",
    f"connect to postgresql://noeta:{SECRET}@db/x and host=db password=hunter99 dbname=x",
    f"{SECRET}{SECRET} twice, then {KEY}",
    f"The passphrase: {PASSPHRASE}. A correct horse is not one.",
]


def scrubber() -> Scrubber:
    scrub = Scrubber()
    scrub.add(SECRET)
    scrub.add(PASSPHRASE)
    return scrub


def shown(pieces: list[str]) -> str:
    scrub = ScrubWindow(scrubber())
    return "".join(scrub.take(piece) for piece in pieces) + scrub.take("", release=True)


@pytest.mark.parametrize("text", TEXTS)
def test_a_secret_cut_anywhere_across_two_pieces_is_scrubbed(text: str) -> None:
    whole = scrubber()(text)
    assert SECRET not in whole and KEY not in whole and PASSPHRASE not in whole
    for cut in range(len(text) + 1):
        assert shown([text[:cut], text[cut:]]) == whole, cut


@pytest.mark.parametrize("text", TEXTS)
def test_a_secret_in_pieces_of_a_few_characters_is_scrubbed(text: str) -> None:
    for size in (1, 2, 3, 7):
        pieces = [text[n : n + size] for n in range(0, len(text), size)]
        assert shown(pieces) == scrubber()(text), size


def test_what_is_held_back_comes_with_a_later_piece_or_the_end() -> None:
    scrub = ScrubWindow(scrubber())
    first = scrub.take("Plain words and a half of hunter2-of")
    assert first.startswith("Plain words") and "hunter2" not in first
    second = scrub.take("-the-store-42 here, and then many more words that follow it.")
    assert REDACTED in second and "hunter2" not in second
    assert first + second + scrub.take("", release=True) == scrubber()(
        "Plain words and a half of hunter2-of-the-store-42 here, and then many more words"
        " that follow it."
    )
