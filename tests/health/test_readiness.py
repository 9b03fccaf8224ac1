"""Readiness asks the store itself, on a connection of its own: current schema ready, a
schema `noeta db migrate` has not brought up to date and a dead port not, each one line;
draining wins over everything."""

from __future__ import annotations

import socket

from noeta.health.readiness import Readiness, store_check


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_current_store_is_ready_until_the_process_drains(postgres_url: str) -> None:
    readiness = Readiness(store_check(postgres_url))
    assert readiness.reasons() == []
    readiness.drain()
    assert readiness.reasons() == ["draining: the process is stopping"]


def test_a_schema_not_migrated_is_not_ready(empty_postgres_url: str) -> None:
    reasons = Readiness(store_check(empty_postgres_url)).reasons()
    assert len(reasons) == 1
    assert reasons[0].startswith("store: the database schema is at version 0")
    assert reasons[0].endswith("run `noeta db migrate`")


def test_a_dead_port_is_not_ready_within_the_timeout() -> None:
    url = f"postgresql://noeta:secret-password@127.0.0.1:{closed_port()}/noeta"
    reasons = Readiness(store_check(url), timeout_seconds=5.0).reasons()
    assert len(reasons) == 1 and reasons[0].startswith("store: cannot connect to PostgreSQL")
    assert "secret-password" not in reasons[0]
