"""The store contract against PostgreSQL."""

from __future__ import annotations

import pytest

from noeta.testing.store_contract import StoreContract


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store_url(self, postgres_url: str) -> str:
        return postgres_url
