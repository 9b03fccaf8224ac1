"""The contract for errors: what a store raises, whatever its driver says.

Every failure leaves a store as one of the `StoreError` tree (`noeta/core/errors.py`),
never as a driver's exception, so the claim loop, the renewer and the scheduler can back
off on any `StoreError` and the runner never mistakes one for a bug:

| condition                                                  | error            |
| the fence refused the append (epoch, lease, sequence)      | Conflict         |
| no task with that id                                       | UnknownTask      |
| the connection broke, or no answer in time, during a write | CommitUnknown    |
| the same during a read; the store closed; the server       | StoreUnavailable |
|   unreachable, shutting down or starting, the session      |                  |
|   ended by an admin, the database read-only (after a       |                  |
|   failover), out of disk, memory or connections; sqlite:   |                  |
|   the file locked past the busy timeout, read-only, full   |                  |
| a pooler refused it before any server saw it (PgBouncer's  | PoolerRefused, a |
|   failed login or its wait for a server; ADR-0155)         | StoreUnavailable |
| no connection could be opened within the deadline (its     | StoreUnreachable,|
|   last attempt's reason said; PostgreSQL; ADR-0156)        | a StoreUnavail-  |
|                                                            |   able           |
| the schema is not this code's                              | SchemaMismatch   |
| anything else refused: a statement or lock timeout, a      | StoreError       |
|   missing grant, a missing table                           |                  |

Real causes that need one backend's own tools are tested beside it
(`tests/stores/test_postgres_errors.py`, `tests/stores/test_pooler_refusals.py`,
`tests/stores/test_outage_lines.py`,
`tests/stores/test_sqlite.py`).
"""

from __future__ import annotations

import pytest

from noeta.core.errors import StoreUnavailable
from noeta.core.ports.store import Store
from noeta.testing.store_contract.fixtures import LEASE, created


class ErrorContract:
    """Failures every store reports the same way."""

    async def test_a_closed_store_is_unavailable(self, store: Store) -> None:
        await store.close()
        with pytest.raises(StoreUnavailable):
            await store.get_task("a")
        with pytest.raises(StoreUnavailable):
            await store.create_task(created("a"))
        with pytest.raises(StoreUnavailable):
            await store.claim("w", ["default"], LEASE)
