"""The server-side limits every pooled noeta session sets, and how a deployment changes
them: the URL's libpq `options` (or PGOPTIONS), which come after noeta's and so win."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.core.errors import ConfigError

# client_connection_check_interval exists from PostgreSQL 14, tcp_user_timeout from 12;
# an older server refuses a session that names them.
CHECK_CLIENT_SINCE = 140000
USER_TIMEOUT_SINCE = 120000


@dataclass(frozen=True)
class SessionLimits:
    """What the server may let one session hold, in seconds (0: no limit).

    The client is always first to act: every store call has a client deadline (10 s by
    default), and a server-side cancel is reported as an error rather than a lost claim,
    so no limit here may cut a statement a healthy client still waits for. They bound
    what a frozen, partitioned or misbehaving client holds, within one default lease
    (30 s): past it the task must be free for another worker to take over.
    """

    # A store statement is one indexed row operation taking milliseconds. One still
    # running at 3 deadlines is one its client gave up on: it must not keep row locks
    # for the rest of a lease.
    statement_seconds: float
    # Statements lock a few task rows, each for one statement: a wait longer than the
    # deadline serves nobody, and 1.5 deadlines stops a worker queueing long behind a
    # migration's ACCESS EXCLUSIVE lock.
    lock_seconds: float
    # A client frozen inside a transaction keeps its task row locked past its lease, and
    # SKIP LOCKED claimers then silently skip that task: end it after one lease.
    idle_in_transaction_seconds: float
    # While a statement runs, check every half deadline that its client is still there
    # (the server-side half of the client's deadline; PostgreSQL 14+).
    check_client_seconds: float

    @classmethod
    def for_deadline(
        cls, deadline_seconds: float, idle_in_transaction_seconds: float
    ) -> SessionLimits:
        return cls(
            statement_seconds=3 * deadline_seconds,
            lock_seconds=1.5 * deadline_seconds,
            idle_in_transaction_seconds=idle_in_transaction_seconds,
            check_client_seconds=deadline_seconds / 2,
        )

    def settings(self, server_version: int) -> dict[str, str]:
        """The settings as `-c` would give them (milliseconds, each setting's unit)."""
        chosen = {
            "statement_timeout": self.statement_seconds,
            "lock_timeout": self.lock_seconds,
            "idle_in_transaction_session_timeout": self.idle_in_transaction_seconds,
        }
        if server_version >= CHECK_CLIENT_SINCE:
            chosen["client_connection_check_interval"] = self.check_client_seconds
        return {name: str(round(seconds * 1000)) for name, seconds in chosen.items()}


def startup_options(dsn: str, settings: Mapping[str, str]) -> str:
    """libpq `options`: noeta's settings first, then the URL's own `options` (else
    PGOPTIONS, as libpq would use), so that a deployment's `-c name=value` wins."""
    try:
        own = conninfo_to_dict(dsn).get("options") or os.environ.get("PGOPTIONS") or ""
    except psycopg.ProgrammingError:  # libpq's reason quotes the URL, password and all
        raise ConfigError(
            "invalid PostgreSQL URL: libpq cannot parse it (in a postgresql:// URL, "
            "percent-encode spaces and '=' inside values, e.g. options=-c%20name%3Dvalue)"
        ) from None
    ours = " ".join(f"-c {name}={value}" for name, value in settings.items())
    return f"{ours} {own}".strip()


# TCP keepalives on every connection a store opens, where its URL sets none (ADR-0129). A
# quiet worker keeps to its warm sessions and leaves the rest idle for hours (ADR-0127):
# a probe every minute keeps a firewall's or a NAT's state for them alive, and a peer that
# vanished is found within about 90 s, the socket reset, rather than at the next
# statement's deadline. libpq's own default waits two hours before its first probe.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "60",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}


# libpq's keepalive settings, and the server's of the same meaning (ADR-0154).
SERVER_KEEPALIVES = {
    "keepalives_idle": "tcp_keepalives_idle",
    "keepalives_interval": "tcp_keepalives_interval",
    "keepalives_count": "tcp_keepalives_count",
}


def server_keepalives(dsn: str, server_version: int) -> dict[str, str]:
    """The server's half of a session's keepalives, as the URL sets the client's (ADR-0154).

    A firewall, a NAT or a failover that forgets a connection drops the client's goodbye
    too, and its backend stays on a socket nobody answers, holding one of
    `max_connections`: for the kernel's two hours if it is idle, unless the server probes
    it as well (`tcp_keepalives_*`); for some 15 minutes of retransmissions if it holds a
    reply or a notification never acknowledged, which no keepalive probe follows, unless
    the server gives up on it as soon (`tcp_user_timeout`: the probes' whole time).
    Nothing where the URL turns keepalives off (`keepalives=0`)."""
    try:
        own = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return {}  # refused, in words that do not quote it, by startup_options
    if own.get("keepalives") == "0":
        return {}
    pairs = SERVER_KEEPALIVES.items()
    chosen = {server: str(own[client]) for client, server in pairs if client in own}
    try:
        idle, interval, count = (int(str(own[client])) for client in SERVER_KEEPALIVES)
    except (KeyError, ValueError):
        return chosen  # a URL's partial choice: the kernel's own for the rest
    if server_version < USER_TIMEOUT_SINCE:
        return chosen
    chosen["tcp_user_timeout"] = str((idle + interval * count) * 1000)  # milliseconds
    return chosen


def with_keepalives(dsn: str) -> str:
    """`dsn` with noeta's keepalives, unless it names any keepalive setting itself (a
    deployment's choice, `keepalives=0` included, is left whole). An unparseable URL is
    left as it is, for `startup_options` to refuse in words that do not quote it."""
    try:
        own = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return dsn
    if any(name in own for name in KEEPALIVES):
        return dsn
    return make_conninfo(dsn, **KEEPALIVES)
