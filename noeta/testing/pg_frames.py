"""Reading the client side of the PostgreSQL wire protocol, enough to tell which SQL
statement a client is running: the fault proxy's way to cut the connection at one kind
of statement (an append), before or after it reaches the server.

Prepared statements send their text once (Parse) and then only their name (Bind), so the
reader keeps each connection's names."""

from __future__ import annotations

import struct

_UNTYPED_REQUESTS = {80877103, 80877104, 80877102}  # SSL, GSS encryption, cancel


class FrontendReader:
    """Fed the bytes a client sends, in order; says whether they bind a marked statement."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self._buffer = b""
        self._started = False
        self._texts: dict[bytes, bytes] = {}

    def feed(self, data: bytes) -> bool:
        """True if `data` completes a Bind (or simple Query) of a statement whose SQL
        holds the marker."""
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
            return self.marker in self._texts.get(statement, b"")
        elif kind == b"Q":  # a simple query
            return self.marker in body
        return False
