"""Reading the client side of the PostgreSQL wire protocol, enough to tell which SQL
statement a client is running: the fault proxy's way to cut the connection at the calls
of the SQL functions a test names, before or after they reach the server.

Prepared statements send their text once (Parse) and then only their name (Bind), so the
reader keeps each connection's names."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable

_UNTYPED_REQUESTS = {80877103, 80877104, 80877102}  # SSL, GSS encryption, cancel


_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_$]*")


def calls_to(functions: Iterable[str]) -> re.Pattern[bytes]:
    """What matches SQL text that calls one of `functions`, by its whole name: a list
    naming `noeta_append` matches `noeta_append(`, never `noeta_append_and_finish(`."""
    names = sorted(set(functions))
    if not names or not all(_IDENTIFIER.fullmatch(name) for name in names):
        raise ValueError(f"SQL function names (lower-case identifiers) are needed: {names}")
    alternatives = b"|".join(name.encode() for name in names)
    return re.compile(rb"(?<![\w$])(?:" + alternatives + rb")\s*\(", re.IGNORECASE)


class FrontendReader:
    """Fed the bytes a client sends, in order; says whether they bind a statement that
    calls one of the functions it was given."""

    def __init__(self, functions: Iterable[str]) -> None:
        self.calls = calls_to(functions)
        self._buffer = b""
        self._started = False
        self._texts: dict[bytes, bytes] = {}

    def feed(self, data: bytes) -> bool:
        """True if `data` completes a Bind (or simple Query) of a statement whose SQL
        calls one of the functions."""
        self._buffer += data
        found = False
        while True:
            if not self._started:
                if len(self._buffer) < 8:
                    return found
                length, code = struct.unpack("!ii", self._buffer[:8])
                if len(self._buffer) < length:
                    return found
                self._buffer = self._buffer[length:]
                self._started = code not in _UNTYPED_REQUESTS
                continue
            if len(self._buffer) < 5:
                return found
            kind = self._buffer[:1]
            (length,) = struct.unpack("!i", self._buffer[1:5])
            if len(self._buffer) < 1 + length:
                return found
            body = self._buffer[5 : 1 + length]
            self._buffer = self._buffer[1 + length :]
            found |= self._read(kind, body)

    def _read(self, kind: bytes, body: bytes) -> bool:
        if kind == b"P":  # Parse: name, text, ...
            name, _, rest = body.partition(b"\0")
            self._texts[name] = rest.partition(b"\0")[0]
        elif kind == b"B":  # Bind: portal, statement, ...
            statement = body.split(b"\0", 2)[1]
            return self.calls.search(self._texts.get(statement, b"")) is not None
        elif kind == b"Q":  # a simple query
            return self.calls.search(body) is not None
        return False
