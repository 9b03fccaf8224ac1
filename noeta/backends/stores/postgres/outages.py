"""One line when PostgreSQL stops taking a process's connections, one when it takes them
again, in place of psycopg_pool's two-line warning for every failed attempt of every
pool (ADR-0156).

A worker holds three or four pools on one server, and each reconnects on its own back-off:
while the server was down for 12 s, psycopg_pool wrote 20 warnings of two lines each, and
the worker's own line blamed a full pool. The lines here are per server (`where`, the
host, port and database, never the password), per process."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("noeta.store")

# psycopg_pool's warning for each failed connection attempt (its text, `logger.warning(
# "error connecting in %r: %s", name, error)`); `tests/stores/test_outage_lines.py` fails
# if a psycopg_pool upgrade changes it, so the warnings would come back beside ours.
POOL_CONNECT_FAILED = "error connecting in %r: %s"
# The pools this store names (`noeta`, `noeta-claims`, `noeta-rounds`, ...): only their
# warnings are ours to replace; an application's own pools keep psycopg_pool's.
OWN_POOLS = "noeta"


class _Outages:
    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def failed(self, where: str, why: str) -> None:
        """A connection to `where` could not be opened: said once until one can."""
        if where not in self._since:
            self._since[where] = time.monotonic()
            log.warning("PostgreSQL at %s: cannot connect (%s); trying again", where, why)

    def connected(self, where: str) -> None:
        since = self._since.pop(where, None)
        if since is not None:
            seconds = time.monotonic() - since
            log.warning("PostgreSQL at %s: connected again after %.1f s", where, seconds)


OUTAGES = _Outages()


class _OwnPoolsConnecting(logging.Filter):
    """Drops psycopg_pool's failed-attempt warnings for this store's pools (OUTAGES says
    it once instead)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != POOL_CONNECT_FAILED or not isinstance(record.args, tuple):
            return True
        return not (record.args and str(record.args[0]).startswith(OWN_POOLS))


logging.getLogger("psycopg.pool").addFilter(_OwnPoolsConnecting())
