"""Session-wide fixtures: one real PostgreSQL server for the whole run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from noeta.testing.postgres import TestPostgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TestPostgres]:
    server = TestPostgres()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: TestPostgres) -> str:
    """A DSN whose search_path is a fresh, empty schema."""
    return postgres_server.new_schema()
