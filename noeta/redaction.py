"""Redaction: the secrets a process holds never reach a span, a metric or a log line.

A `Scrubber` knows the secret values of this process (API keys and passwords from the
environment, the store URL's password) and removes them, and anything shaped like a
known key format or a password in a URL or a libpq connection string, from any text.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

REDACTED = "[redacted]"
# The one list of environment variables that hold secrets, for the log and span scrubbers.
# (Tools never see the worker's environment at all: theirs is built from an allowlist,
# noeta.plugins.tool_environment.) Values of these names are secrets whole, except that
# a URL or connection string contributes its password and a header list its values.
SECRET_NAMES = re.compile(
    r"KEY|SECRET|TOKEN|PASSW|CREDENTIAL|DSN|AUTH(?!OR)|COOKIE|_HEADERS$"
    r"|^NOETA_STORE$|^NOETA_STORE_SESSION$|^DATABASE_URL$",
    re.I,
)
# Proxy settings carry a password only inside a URL (http://user:password@proxy).
PROXY_NAMES = re.compile(r"_PROXY$", re.I)
# Shorter values are too likely to occur by chance (and too weak to be real secrets).
MIN_SECRET_CHARS = 6
# Values passed to tools (`pass_env:`) are scrubbed whatever their name, so a longer
# floor: a variable that is no secret (a region, a flag) must not blank ordinary text.
MIN_PASSED_SECRET_CHARS = 8
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)([^@\s]+)(@)")
_CONNINFO_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I)
# Keys recognisable by their shape, so that a process which never held them (a page, a
# `noeta show`) still hides what a tool printed. Each needs its vendor's prefix and a
# random-looking tail, so commit ids, UUIDs and base64 in code do not match.
# A key starts where a word cannot go on: after a non-word character, or after a JSON
# escape (`\n`, `\t`), since spans scrub JSON-encoded content where "…\nsk-…" is text.
_KEY_START = r"(?:(?<![A-Za-z0-9_])|(?<=\\[nrt]))"
_KEY_FORMATS = re.compile(
    rf"""
    {_KEY_START}
    (?: sk-ant-[A-Za-z0-9_-]{{20,}}                           # Anthropic
      | sk-(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Za-z])
        [A-Za-z0-9_-]{{20,}}                                  # OpenAI (and alike)
      | gh[poushr]_[A-Za-z0-9]{{30,}}                         # GitHub tokens
      | github_pat_[A-Za-z0-9_]{{30,}}                        # GitHub fine-grained
      | eyJ[A-Za-z0-9_-]{{8,}}\.eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]*  # a JWT
      | (?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{{16}}(?![A-Za-z0-9])  # AWS
    )
    """,
    re.VERBOSE,
)


class Scrubber:
    def __init__(self) -> None:
        self.secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def add(self, secret: str) -> None:
        if len(secret) >= MIN_SECRET_CHARS and secret not in self.secrets:
            self.secrets.add(secret)
            self._pattern = None

    def add_url(self, url: str) -> None:
        """The password of a store URL or libpq string; a bare value is taken as a secret."""
        found = _password_of(url)
        if found:
            self.add(found)
            self.add(unquote(found))
        elif "://" not in url and "=" not in url:
            self.add(url)

    def add_passed(self, names: Iterable[str]) -> list[str]:
        """The values of the variables the operator passes to tools (`pass_env:`),
        whatever their names: a command can print them. Returns the names whose values
        are too short to scrub without blanking ordinary text."""
        too_short: list[str] = []
        for name in names:
            value = os.environ.get(name)
            if not value:
                continue
            if len(value) < MIN_PASSED_SECRET_CHARS:
                too_short.append(name)
                continue
            self.add(value)
            if "://" in value or "=" in value:
                self.add_url(value)  # its password alone, should it be printed apart
        return too_short

    def add_environment(self) -> None:
        for name, value in os.environ.items():
            if not value or not is_secret_name(name):
                continue
            if name.upper().endswith("_HEADERS"):  # OTLP: "key=value,key2=value2"
                for header in value.split(","):
                    self.add(unquote(header.partition("=")[2]).strip())
                    self.add(header.partition("=")[2].strip())
            elif PROXY_NAMES.search(name):
                self.add(_password_of(value))
            elif "://" in value or "=" in value:
                self.add_url(value)
            else:
                self.add(value)

    def __call__(self, text: str) -> str:
        text = scrub_key_formats(text)
        text = _CONNINFO_PASSWORD.sub(rf"\g<1>{REDACTED}", text)
        if not self.secrets:
            return text
        if self._pattern is None:
            longest_first = sorted(self.secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in longest_first))
        return self._pattern.sub(REDACTED, text)


def scrub_key_formats(text: str) -> str:
    """`text` without what has the shape of a secret, whoever's it is: API keys and tokens
    of the known formats, and the password of a URL (`scheme://user:password@host`).
    A secret of an unknown format is not found here; only a process that holds it can
    remove it (`Scrubber.add`)."""
    text = _KEY_FORMATS.sub(REDACTED, text)
    return _URL_PASSWORD.sub(rf"\g<1>{REDACTED}\g<3>", text)


def is_secret_name(name: str) -> bool:
    """Whether the environment variable `name` holds a secret (or a URL with a password)."""
    return bool(SECRET_NAMES.search(name) or PROXY_NAMES.search(name))


def _password_of(url: str) -> str:
    if "://" in url:
        try:
            return urlsplit(url).password or ""
        except ValueError:
            return ""
    match = _CONNINFO_PASSWORD.search(url)
    return match.group(2).strip("'") if match else ""


class ScrubbingFilter(logging.Filter):
    """A log filter that scrubs each record's message (and its traceback) of secrets."""

    def __init__(self, scrub: Scrubber) -> None:
        super().__init__()
        self.scrub = scrub

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        record.msg, record.args = self.scrub(message), None
        return True


# A stream's text is scrubbed with what is held back of it (ScrubWindow): at most this
# many characters are held, however long a word runs without a space.
MAX_HELD_CHARS = 4096
# The end of a text that may go on as a secret after a space: `password = ` of a libpq
# string, whose value the next write brings.
_OPEN_PASSWORD = re.compile(r"password\s*=?\s*$", re.I)


class ScrubWindow:
    """Scrubs a text that arrives in pieces (a command's output as it is written), so
    that a secret split across two pieces is found whole: each piece is scrubbed with the
    end of the one before, which was held back.

    What is held: the last word (keys have no space in them), with what a secret found
    across the cut covers, a `password =` that waits for its value, and an end that
    begins a known secret with a space in it (a passphrase split at its space).
    `release` gives everything (the output ended)."""

    def __init__(self, scrub: Scrubber) -> None:
        self.scrub = scrub  # a Scrubber, not any function: its secrets say what to hold
        self.held = ""

    def take(self, piece: str, release: bool = False) -> str:
        text = self.held + piece
        cut = len(text) if release else self._cut(text)
        self.held = text[cut:]
        return self.scrub(text[:cut]) if cut else ""

    def _cut(self, text: str) -> int:
        cut = _word_start(text)
        if len(text) - cut > MAX_HELD_CHARS:  # a word too long to be held: scrubbed as is
            return len(text)
        cut = min(cut, _spaced_secret_start(text, self.scrub.secrets))
        whole = self.scrub(text)
        while cut > 0:
            head = text[:cut]
            # A cut inside a secret scrubs differently from the whole; so does a cut
            # after a `password =` (its value comes after it).
            split = self.scrub(head) + self.scrub(text[cut:])
            if split == whole and not _OPEN_PASSWORD.search(head):
                return cut
            cut = _word_start(head.rstrip())
        return 0


def _spaced_secret_start(text: str, secrets: Iterable[str]) -> int:
    """Where the end of `text` that begins a secret with a space in it starts (the last
    word alone would let its first words through); len(text) if none does."""
    start = len(text)
    for secret in secrets:
        if not any(c.isspace() for c in secret):
            continue
        for size in range(min(len(secret) - 1, len(text)), len(text) - start, -1):
            if text.endswith(secret[:size]):
                start = len(text) - size
                break
    return start


def _word_start(text: str) -> int:
    """Where the last run of characters without a space in `text` starts."""
    cut = len(text)
    while cut > 0 and not text[cut - 1].isspace():
        cut -= 1
    return cut
