-- A task is this row plus its log (events). The row holds only what the store needs to
-- enforce one writer per task and to find the next task to claim.
--
-- Time, in every sqlite table: INTEGER microseconds since the Unix epoch, UTC, from the
-- machine clock (every process sharing the file shares that clock). Integers sort like
-- the times they stand for, and hold a timestamptz's microseconds exactly, so a datetime
-- reads back equal to the one written; REAL seconds would round. The store always
-- supplies the time; the defaults below only serve rows written by hand.
CREATE TABLE tasks (
    id           TEXT PRIMARY KEY NOT NULL,
    -- Workers claim from named queues (noeta worker --queues).
    queue        TEXT NOT NULL,
    status       TEXT NOT NULL CHECK (status IN
                     ('ready', 'running', 'holding', 'waiting', 'done', 'failed', 'cancelled')),
    -- The worker that holds the claim (running, holding); kept afterwards for operators.
    owner        TEXT,
    -- Bumped by every claim. An append carries the epoch it was claimed at and is refused
    -- unless it still equals this: the fence that makes a woken stale worker harmless.
    owner_epoch  INTEGER NOT NULL DEFAULT 0,
    -- Machine clock. Only decides when a silent worker's task may be taken over.
    lease_until  INTEGER,
    -- When a ready or waiting task falls due (a delay, a timer); NULL: no time set.
    ready_at     INTEGER,
    -- When the task may next be claimed, whatever its status: ready_at (or creation) for
    -- ready, ready_at or the first delivery for waiting, lease_until for running and
    -- holding, NULL when nothing but a delivery can make it claimable, or never (finished).
    -- One column so that one partial index can serve the claim in due-time order.
    claimable_at INTEGER,
    -- A waiting task is woken only by deliveries whose dedupe key starts with this (a
    -- task waiting for an answer to one call is not woken, over and over, by chat).
    -- NULL: any delivery wakes it.
    wake_prefix  TEXT,
    -- Sequence number of the last event in the log; appends check it (expected_seq).
    last_seq     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL
                     DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    updated_at   INTEGER NOT NULL
                     DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    CONSTRAINT claimed_tasks_have_an_owner_and_lease CHECK (
        status NOT IN ('running', 'holding')
        OR (owner IS NOT NULL AND lease_until IS NOT NULL AND claimable_at = lease_until)),
    CONSTRAINT finished_tasks_are_never_claimable CHECK (
        status NOT IN ('done', 'failed', 'cancelled') OR claimable_at IS NULL)
);

-- The claim index. Partial: it holds only rows that can become claimable by time alone,
-- so tasks waiting for a message and finished tasks (the vast majority in a busy
-- deployment) are never in it and never scanned. Ordered by claimable_at, the claim walks
-- it from the oldest due row and stops at the present, so rows due in the future
-- (timers, delayed tasks) cost nothing either. sqlite has no INCLUDE: queue is a second
-- key column instead, so the queue filter is still answered from the index.
CREATE INDEX tasks_claimable ON tasks (claimable_at, queue)
    WHERE claimable_at IS NOT NULL;

-- noeta tasks --status S --queue Q, and adoption after a lost claim reply (owner).
CREATE INDEX tasks_by_status ON tasks (status, queue);
CREATE INDEX tasks_by_owner ON tasks (owner) WHERE status IN ('running', 'holding');
