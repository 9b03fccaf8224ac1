-- Fleet budgets, as in PostgreSQL's 0032 (ADR-0110); times are microseconds since the
-- epoch, amounts USD as decimal text (sqlite has no exact numeric: the client adds them
-- as Decimals). The budget's rules are in the client (stores/sqlite/model_limits.py),
-- under the append's write lock.
CREATE TABLE fleet_budgets (
    queue           TEXT NOT NULL,
    concurrency_key TEXT NOT NULL DEFAULT '',
    period          TEXT NOT NULL CHECK (period IN ('hour', 'day', 'month')),
    amount          TEXT NOT NULL,
    spent           TEXT NOT NULL DEFAULT '0',
    period_start    INTEGER,
    calls           INTEGER NOT NULL DEFAULT 0,
    refusals        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, concurrency_key, period)
);
