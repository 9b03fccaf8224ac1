"""The claim loop's store errors in a row, and how long they ask it to wait."""

from __future__ import annotations

import random

from noeta.core.errors import PoolerRefused, StoreError
from noeta.core.retry import backoff_seconds


class ClaimFailures:
    def __init__(self, poll_seconds: float, lease_seconds: float) -> None:
        self.count = 0
        self.last: StoreError | None = None  # the last claim's error, None once one succeeds
        self._refused = False  # the last of them a pooler's refusal
        self._poll_seconds = poll_seconds
        self._lease_seconds = lease_seconds

    def failed(self, error: StoreError) -> None:
        self.count += 1
        self.last = error
        self._refused = isinstance(error, PoolerRefused)

    def succeeded(self) -> None:
        self.count = 0
        self.last = None

    def wait(self) -> float:
        """The wait after `count` store errors in a row, jittered so workers do not return
        as a herd; at most a lease: a store back from an outage waits no longer than a
        takeover would. After a pooler's refusal, the poll: the pooler refuses at once
        without the server, and a back-off grown over its refusal window
        (`server_login_retry`, 15 s by default) kept a worker idle as long again after it
        (ADR-0155)."""
        retry_after = self._poll_seconds if self._refused else None
        wait = backoff_seconds(self.count, retry_after, random.random())
        return min(wait, self._lease_seconds)
