"""The store contract against PostgreSQL: directly, and through a PgBouncer in transaction
mode with the session URL beside it (ADR-0106)."""

from __future__ import annotations

import pytest

from noeta.testing.pgbouncer import PgBouncer
from noeta.testing.store_contract import StoreContract


class TestPostgresStore(StoreContract):
    @pytest.fixture(params=["direct", "pgbouncer"])
    def store_url(
        self, request: pytest.FixtureRequest, postgres_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> str:
        if request.param == "direct":
            return postgres_url
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        monkeypatch.setenv("NOETA_STORE_SESSION", postgres_url)
        return bouncer.pooled(postgres_url)
