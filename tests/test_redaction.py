"""The scrubber: the secrets a process holds never reach a span or a log line."""

from __future__ import annotations

import logging

import pytest

from noeta.redaction import (
    MAX_HELD_CHARS,
    REDACTED,
    Scrubber,
    ScrubbingFilter,
    ScrubWindow,
    is_secret_name,
)


def test_passwords_in_urls_and_connection_strings_are_removed_whoever_wrote_them() -> None:
    scrub = Scrubber()
    assert (
        scrub("postgresql://noeta:hunter22@db:5432/x") == f"postgresql://noeta:{REDACTED}@db:5432/x"
    )
    assert scrub("host=db password=hunter22 dbname=x") == f"host=db password={REDACTED} dbname=x"
    assert scrub("password='hun ter' host=db") == f"password={REDACTED} host=db"


def test_known_secrets_are_removed_wherever_they_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdef123")
    monkeypatch.setenv("NOETA_STORE", "postgresql://u:p%40ss-word@db/x")
    scrub = Scrubber()
    scrub.add_environment()
    assert scrub("Incorrect API key provided: sk-test-abcdef123.") == (
        f"Incorrect API key provided: {REDACTED}."
    )
    assert scrub("echo p@ss-word") == f"echo {REDACTED}"  # the decoded password too
    assert scrub("nothing secret here") == "nothing secret here"


def test_short_values_are_not_taken_for_secrets() -> None:
    scrub = Scrubber()
    scrub.add("abc")  # would blank out every "abc" in every message
    assert scrub("abc") == "abc"


def test_the_log_filter_scrubs_messages_and_tracebacks() -> None:
    scrub = Scrubber()
    scrub.add("sk-test-abcdef123")
    try:
        raise RuntimeError("refused sk-test-abcdef123")
    except RuntimeError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "key %s", ("sk-test-abcdef123",), True
        )
        import sys

        record.exc_info = sys.exc_info()
    assert ScrubbingFilter(scrub).filter(record)
    text = logging.Formatter().format(record)
    assert "sk-test-abcdef123" not in text and "refused [redacted]" in text


def test_every_kind_of_worker_secret_in_the_environment_is_scrubbed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:dburl-secret@db/app")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20otlp-hdr-secret,x=1")
    monkeypatch.setenv("HTTPS_PROXY", "http://user:proxy-secret@proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    monkeypatch.setenv("PGHOST", "localhost")
    scrub = Scrubber()
    scrub.add_environment()
    text = "dburl-secret | Bearer otlp-hdr-secret | proxy-secret | localhost,127.0.0.1"
    assert scrub(text) == f"{REDACTED} | {REDACTED} | {REDACTED} | localhost,127.0.0.1"


@pytest.mark.parametrize(
    ("name", "secret"),
    [("NOETA_STORE", True), ("DATABASE_URL", True), ("OTEL_EXPORTER_OTLP_HEADERS", True),
     ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", True), ("HTTPS_PROXY", True), ("http_proxy", True),
     ("ANTHROPIC_API_KEY", True), ("PGPASSWORD", True), ("SSH_AUTH_SOCK", True),
     ("PATH", False), ("LANG", False), ("PGHOST", False), ("NOETA_CONFIG", False)],
)  # fmt: skip
def test_one_list_says_which_variables_are_secrets(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def pieces_through(window: ScrubWindow, pieces: list[str]) -> list[str]:
    return [window.take(piece) for piece in pieces] + [window.take("", release=True)]


def test_a_secret_split_across_pieces_is_found_whole() -> None:
    scrub = Scrubber()
    scrub.add("hunter2-supersecret")
    pieces = ["step 1\n", "key is hunt", "er2-supersecret and sk-ant-", "A" * 24 + " done\n"]
    given = pieces_through(ScrubWindow(scrub), pieces)
    assert given[0] == "step 1\n"  # a finished line goes at once
    assert given[1] == "key is "  # the word that may be a secret's start waits
    assert "".join(given) == "step 1\nkey is [redacted] and [redacted] done\n"


def test_a_password_waits_for_its_value_and_a_url_for_its_host() -> None:
    given = pieces_through(
        ScrubWindow(Scrubber()),
        ["dsn: password = ", "pw-for-the-db x\n", "see https://u:pass", "word@host now\n"],
    )
    assert given[0] == "dsn: "
    assert "".join(given) == "dsn: password = [redacted] x\nsee https://u:[redacted]@host now\n"


def test_a_word_too_long_to_hold_goes_scrubbed_and_the_rest_at_release() -> None:
    window = ScrubWindow(Scrubber())
    assert window.take("x" * (MAX_HELD_CHARS + 10)) == "x" * (MAX_HELD_CHARS + 10)
    assert window.take("tail") == ""
    assert window.take("", release=True) == "tail"
