"""What both adapters share: the JSON bytes and the reading of retry-after."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from noeta.backends.models.wire import encode_json, retry_after
from noeta.core.errors import PayloadError


def test_json_is_compact_utf8_in_insertion_order() -> None:
    assert encode_json({"b": 1, "a": [0.1, "é"]}) == '{"b":1,"a":[0.1,"é"]}'.encode()


def test_surrogate_pairs_join_and_lone_surrogates_are_replaced() -> None:
    assert encode_json("\ud83d\ude00 \udc80") == '"😀 \ufffd"'.encode()


def test_values_without_exact_json_are_refused() -> None:
    with pytest.raises(PayloadError):
        encode_json(float("nan"))


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # in the past
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after(httpx.Headers(headers)) == expected


def test_retry_after_as_a_date_to_come() -> None:
    date = email.utils.formatdate(time.time() + 60, usegmt=True)
    seconds = retry_after(httpx.Headers({"retry-after": date}))
    assert seconds is not None
    assert 50 < seconds <= 60
