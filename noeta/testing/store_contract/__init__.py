"""The contract every task store keeps, as a reusable pytest class.

A backend's test module subclasses `StoreContract` once and provides one fixture,
`store_url`: the URL of a fresh, empty store for each test. `StoreContract` is one mixin
per concern (River's driver suite); a change to the `Store` protocol extends it first.
"""

from __future__ import annotations

from noeta.testing.store_contract.append_and_claim import AppendAndClaimContract
from noeta.testing.store_contract.bulk import BulkContract
from noeta.testing.store_contract.capabilities import CapabilityContract
from noeta.testing.store_contract.claim_and_load import ClaimAndLoadContract
from noeta.testing.store_contract.claims import ClaimContract
from noeta.testing.store_contract.cron import CronContract
from noeta.testing.store_contract.errors import ErrorContract
from noeta.testing.store_contract.fence import FenceContract
from noeta.testing.store_contract.fixtures import (
    LEASE,
    SHORT_LEASE,
    StoreFixtures,
    created,
    eventually_claim,
    take_over,
)
from noeta.testing.store_contract.fleet_budgets import FleetBudgetContract
from noeta.testing.store_contract.inbox import InboxContract
from noeta.testing.store_contract.job_starts import JobStartsContract
from noeta.testing.store_contract.late_results import LateResultContract
from noeta.testing.store_contract.logs import LogContract
from noeta.testing.store_contract.model_limits import ModelLimitContract
from noeta.testing.store_contract.queue_limits import QueueLimitContract
from noeta.testing.store_contract.retention import RetentionContract
from noeta.testing.store_contract.started_tasks import StartedTaskContract
from noeta.testing.store_contract.unique_jobs import UniqueJobsContract
from noeta.testing.store_contract.worker_registry import WorkerRegistryContract

__all__ = ["LEASE", "SHORT_LEASE", "StoreContract", "created", "eventually_claim", "take_over"]


class StoreContract(
    StoreFixtures,
    ClaimContract,
    ClaimAndLoadContract,
    JobStartsContract,
    StartedTaskContract,
    AppendAndClaimContract,
    FenceContract,
    InboxContract,
    LogContract,
    CronContract,
    ErrorContract,
    LateResultContract,
    BulkContract,
    RetentionContract,
    ModelLimitContract,
    FleetBudgetContract,
    QueueLimitContract,
    CapabilityContract,
    UniqueJobsContract,
    WorkerRegistryContract,
):
    """Not collected by itself (no Test prefix); subclass as `TestXStore(StoreContract)`."""
