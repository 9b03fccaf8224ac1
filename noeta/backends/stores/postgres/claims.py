"""Claims and leases on PostgreSQL: claiming (the next due task, or one named task),
renewing a worker's round, releasing, and what is due or owned."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from noeta.backends.stores.job_starts import pin_names, pinned_data
from noeta.backends.stores.postgres.claimed import claim_params, claimed_tasks, known_params
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports.store import Claim, ClaimedTask, JobStarts, check_key, check_lease

# The claim itself, of the rows `due` picked (the due walk's, or the named ones').
_CLAIMED = """ claimed AS (
    UPDATE tasks AS t
       SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
           lease_until = lease.until, claimable_at = lease.until,
           updated_at = clock_timestamp(){start_row}
      FROM {start_from}, lease
     WHERE t.id = due.id AND t.id = ANY(ARRAY(SELECT d.id FROM due AS d))
    RETURNING t.id, t.owner_epoch, t.lease_until, t.last_seq, due.taken_over, due.limited,
              t.queue{start_returns}
)"""

# Claim up to %(limit)s tasks, the highest priority first and then those due longest, each
# with its own epoch and lease. A queue without settings is walked as before limits
# existed, per queue (LATERAL over the worker's queues), so a backlog due in another queue
# is never read, and no lock or count is taken; and per priority: one entry of
# tasks_claimable_by_priority says the highest a row of the queue has, then one probe per
# priority from there down to 0 (a queue that never uses priorities: one probe). A queue
# with settings is asked through noeta_claimable_under_limits (0013), which locks its
# settings row, counts its live claims and returns at most the room left; those queues
# are taken in name order, so two claimers never wait for each other's locks in a
# circle. The rate's tokens are charged by `charged`, for the tasks claimed, not for the
# candidates the function offered: the ORDER BY ... LIMIT across queues may drop some
# (0014). That row is still locked by the function, in this transaction.
# now() (the statement's start; this statement is its own transaction) is stable,
# so PostgreSQL can use it as the index bound and stop each walk at the present;
# clock_timestamp() is volatile and would make it a filter that walks every future-dated
# row. SKIP LOCKED: claimants never wait on each other's tasks. %(excluding)s: the
# claimer's own runs, never claimed again by it (ADR-0079); in a queue with settings the
# function may offer one, which then only leaves its slot unused this once.
# %(offers)s: the plugin names the claimer has; a task needing one it lacks is left to a
# worker that has it (NULL: it offers anything, and the filter is one constant test).
# The walk reads, and skips, the due rows it cannot run ahead of those it can: ADR-0092.
# Planned once per connection (ADR-0108): planning it took longer than running it, so the
# claims that load run their generic plan, which must be as good as a custom one whatever
# the parameters. Hence `capped`: a constant LIMIT that bounds the planner's estimate of
# `due` (a LIMIT parameter is estimated at a tenth of the rows); the update finds its rows
# by primary key (ANY(ARRAY(...))), never by a hash of `tasks`; and the reads of events,
# snapshots and inbox rows are LATERAL subqueries behind OFFSET 0, which the planner
# cannot turn into a hash join over the whole table.
_CLAIM_DUE_TASKS = (
    """
WITH due AS MATERIALIZED (SELECT * FROM (
    SELECT found.*, false AS limited
      FROM (SELECT q.queue, (SELECT t.priority FROM tasks AS t
                               WHERE t.queue = q.queue AND t.claimable_at IS NOT NULL
                               ORDER BY t.priority DESC LIMIT 1) AS top
              FROM unnest(%(queues)s::text[]) AS q(queue)
             WHERE NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = q.queue)
            OFFSET 0) AS q,
           generate_series(q.top, 0, -1) AS p(priority),
           LATERAL (
        SELECT t.id, t.priority, t.claimable_at, t.status IN ('running', 'holding') AS taken_over
          FROM tasks AS t
         WHERE t.queue = q.queue AND t.priority = p.priority AND t.claimable_at <= now()
           AND t.id <> ALL(%(excluding)s::text[])
           AND (%(offers)s::text[] IS NULL OR t.needs IS NULL OR t.needs <@ %(offers)s::text[])
         ORDER BY t.claimable_at
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED
     ) AS found
    UNION ALL
    SELECT limited.id, limited.priority, limited.claimable_at, limited.taken_over, true
      FROM (SELECT s.queue FROM queue_settings AS s
             WHERE s.queue = ANY(%(queues)s::text[]) ORDER BY s.queue OFFSET 0) AS q,
           noeta_claimable_under_limits(q.queue, %(limit)s, false, %(offers)s::text[]) AS limited
     WHERE limited.id <> ALL(%(excluding)s::text[])
     ORDER BY 2 DESC, 3
     LIMIT %(limit)s) AS capped LIMIT 1000
), lease AS (
    SELECT clock_timestamp() AS at, clock_timestamp() + make_interval(secs => %(lease)s) AS until
){starting},"""
    + _CLAIMED
    + """, charged AS (
    UPDATE queue_settings AS s
       SET rate_tokens = least(s.rate_count::float8, coalesce(s.rate_tokens, s.rate_count)
               + extract(epoch FROM lease.at - coalesce(s.rate_at, lease.at))
                 * s.rate_count / s.rate_seconds) - took.n,
           rate_at = lease.at
      FROM (SELECT c.queue, count(*) AS n FROM claimed AS c WHERE c.limited GROUP BY c.queue)
           AS took, lease
     WHERE s.queue = took.queue AND s.rate_count IS NOT NULL
)"""
)

# A fresh plain job among the claimed (JobStarts, ADR-0101): its log is TaskCreated,
# CallRequested and at most a PluginsPinned whose names the claimer has, then at most the
# SubtaskOf of a canvas member (ADR-0104, ADR-0109: a member's fourth event, and no other
# event is a SubtaskOf, so its type is enough); not taken over
# (a ready row: no fenced append can race the claim's); no inbox entry (a cancel is seen
# by its run first). `events`: 1 (its ToolStarted) where its pin is the claimer's, else 2
# (the claimer's pin first, as its run's first append would carry it). The CASE keeps a
# non-pin third event's data from being read as JSON. A pin whose JSON is the claimer's
# own is taken without listing its names: the function scan that lists them cost an idle
# claim of one job 8-17 µs of its 160-205 (ADR-0138); another pin's are listed as before.
# The probes name their tables without aliases, and the reads below too: the statement
# must stay under psycopg's cache limit (`CLAIM_AND_START_JOBS`), and these are the
# characters it can spare.
_STARTING = """, starting AS (
    SELECT d.id, j.data AS call,
           CASE WHEN k.data::jsonb = %(pinned)s::jsonb THEN 1 ELSE 2 END AS events
      FROM due d
     CROSS JOIN LATERAL (SELECT j.data FROM events j
                          WHERE j.task_id = d.id AND j.seq = 2 AND j.type = 'CallRequested'
                         OFFSET 0) AS j
      LEFT JOIN LATERAL (SELECT k.type, k.data FROM events k
                          WHERE k.task_id = d.id AND k.seq = 3 OFFSET 0) AS k ON true
     WHERE NOT d.taken_over
       AND CASE WHEN k.type IS NULL THEN true WHEN k.type <> 'PluginsPinned' THEN false
           WHEN k.data::jsonb = %(pinned)s::jsonb THEN true
           ELSE ARRAY(SELECT x->>0 FROM json_array_elements(k.data::json->'pins') x)
                <@ %(needs)s::text[] END
       AND NOT (SELECT EXISTS (SELECT FROM events WHERE task_id = d.id AND seq > 3
                                 AND type <> 'SubtaskOf'))
       AND NOT (SELECT EXISTS (SELECT FROM inbox WHERE task_id = d.id AND taken_seq IS NULL))
)"""
# The claim's own update of a started job's row: its log's end, and its needs from the
# pin it wrote, as the appends write them (0025).
_START_ROW = """,
           last_seq = t.last_seq + coalesce(s.events, 0),
           needs = CASE WHEN s.events = 2 THEN %(needs)s::text[] ELSE t.needs END"""


# What `_compact` keeps as it is: quoted literals, and the text others look for in
# pg_stat_statements to count claims.
_KEPT = re.compile(r"('(?:[^']|'')*'|owner_epoch = t\.owner_epoch \+)")
# An operator or a parenthesis or comma, with the spaces around it. None of the operators
# the claims use ends in a character that would join the next into a longer token or a
# comment: no "- -", no "/ *" (and a multi-character operator cannot end in + or -).
_SPACED = re.compile(r" ?(<@|<=|<>|=>|[(),=<>+*/-]) ?")
# A table's alias needs no AS.
_TABLE_AS = re.compile(
    r"\b(tasks|events|inbox|snapshots?|queue_settings|due|claimed|started|starting) AS (?=\w\b)"
)
# Nor a subquery's, or a function's (the names the claims give them).
_ALIAS_AS = re.compile(r"\)AS (?=(?:q|p|found|capped|limited|took|j|k|e|i|s)\b)")


def _compact(statement: str) -> str:
    """The statement without the whitespace its parser does not need: runs of it made one
    space, none beside a parenthesis, comma or operator; `_KEPT` kept as it is."""
    parts = _KEPT.split(statement)
    for i in range(0, len(parts), 2):
        parts[i] = _SPACED.sub(r"\1", " ".join(parts[i].split()))
        parts[i] = _ALIAS_AS.sub(")", _TABLE_AS.sub(r"\1 ", parts[i]))
    return "".join(parts)


_CLAIM_ONLY = {"starting": "", "start_row": "", "start_from": "due", "start_returns": ""}
_CLAIM_STARTING = {
    "starting": _STARTING,
    "start_row": _START_ROW,
    "start_from": "due LEFT JOIN starting AS s ON s.id = due.id",
    "start_returns": ", coalesce(s.events, 0) AS started, s.call",
}

CLAIM_NEXT_TASK = f"""{_CLAIM_DUE_TASKS.format(**_CLAIM_ONLY)}
SELECT id, owner_epoch, lease_until, taken_over FROM claimed
"""

# The claim and, in the same statement, what each claimed task's run reads first: its
# snapshot of this version, the log after it, its untaken inbox. Rows of four parts (0
# claim, 1 snapshot, 2 event, 3 inbox entry) in one shape; the reads see the statement's
# snapshot, so an append committed after it began (a lapsed owner's, just before the
# claim locked the row) is missing: the client sees the log end short of last_seq and
# loads that task again.
_LOAD = """{known}, snapshot AS (
    SELECT s.* FROM claimed AS c,
           LATERAL (SELECT s.task_id, s.seq, s.data FROM snapshots AS s
                          WHERE s.task_id = c.id AND s.version = %(version)s OFFSET 0) AS s{unknown}
){started}
SELECT 0, c.id, c.last_seq, c.owner_epoch, {mark}, NULL, c.lease_until, {known_mark},
       c.taken_over, NULL
  FROM claimed AS c
UNION ALL
SELECT 1, s.task_id, s.seq, NULL, NULL, NULL, NULL, NULL, NULL, s.data FROM snapshot AS s
UNION ALL
SELECT 2, e.task_id, e.seq, e.epoch, e.type, e.data, e.created_at, e.owner, NULL, NULL
  FROM claimed AS c, LATERAL (SELECT * FROM events WHERE task_id = c.id
   AND seq > {after}
   OFFSET 0) AS e
UNION ALL
SELECT 3, i.task_id, i.id, i.taken_seq, i.dedupe_key, i.payload, i.created_at, NULL, NULL,
       NULL
  FROM claimed AS c,
       LATERAL (SELECT * FROM inbox WHERE task_id = c.id AND taken_seq IS NULL
                OFFSET 0) AS i{started_rows}
 ORDER BY 1, 2, 3
"""
# Where the events read start: after the snapshot read, if any.
_FROM_SNAPSHOT = {
    "known": "",
    "unknown": "",
    "known_mark": "NULL",
    "after": "coalesce((SELECT s.seq FROM snapshot AS s WHERE s.task_id = c.id), 0)",
}
CLAIM_AND_LOAD = _compact(
    _CLAIM_DUE_TASKS.format(**_CLAIM_ONLY)
    + _LOAD.format(started="", mark="NULL", started_rows="", **_FROM_SNAPSHOT)
)

# The same, starting the fresh jobs it claims (ADR-0101): their events written in the
# claim's statement and commit, read back with the rest of the log (the statement's own
# reads do not see its inserts). The ToolStarted's data is the CallRequested's, less its
# retry_of, plus an empty trace: both encodings keep their fields in order (events.py),
# and a job's input is an object, so its text ends "}}" where no retry_of follows it.
# RETURNING names a part 2 row's columns in order: they are read back as `s.*`. No SQL
# comment in here: the statement is sent on one line (`_compact`).
_STARTED = """, started AS (
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
    SELECT c.id, c.last_seq - 2 + e.n, e.type, e.data, c.owner_epoch, %(worker)s
      FROM claimed c, LATERAL (VALUES (1, 'PluginsPinned', %(pinned)s::text),
           (2, 'ToolStarted',
            regexp_replace(c.call, '(,"retry_of":"([^"\\\\]|\\\\.)*")?}$', ',"trace":""}'))
      ) e(n, type, data)
     WHERE e.n > 2 - c.started
    RETURNING task_id, seq, epoch, type, data, created_at, owner
)"""
# Compacted (`_compact`): psycopg parses a statement longer than 4,096 bytes again at every
# execute (its cache's limit), and this one is that long with its layout.
CLAIM_AND_START_JOBS = _CLAIM_DUE_TASKS.format(**_CLAIM_STARTING) + _LOAD.format(
    started=_STARTED,
    mark="nullif(c.started, 0)::text",
    started_rows="""
UNION ALL
SELECT 2, s.*, NULL, NULL FROM started AS s""",
    **_FROM_SNAPSHOT,
)
CLAIM_AND_START_JOBS = _compact(CLAIM_AND_START_JOBS)

# The claim and load of CLAIM_AND_LOAD, from the named tasks only (`only`: a worker
# continuing what the run it just ended made claimable; ADR-0109): those claimable now, in
# the claimer's queues and in none with settings (a queue's limits, paused, rate and per
# key, are the due walk's to weigh: a task there waits for it), needing nothing it lacks.
# SKIP LOCKED: a task another claimer is taking, or a writer holds, is left to it.
# Claimable by clock_timestamp(), not now(): pipelined after the append that delivers to
# it (ADR-0121), the claim runs in that append's transaction, whose now() came before the
# delivery made the task claimable.
_CLAIM_NAMED_TASKS = (
    """
WITH due AS MATERIALIZED (
    SELECT t.id, t.status IN ('running', 'holding') AS taken_over, false AS limited
      FROM tasks AS t
     WHERE t.id = ANY(%(only)s::text[]) AND t.claimable_at <= clock_timestamp()
       AND t.queue = ANY(%(queues)s::text[]) AND t.id <> ALL(%(excluding)s::text[])
       AND (%(offers)s::text[] IS NULL OR t.needs IS NULL OR t.needs <@ %(offers)s::text[])
       AND NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = t.queue)
     ORDER BY t.id
     LIMIT %(limit)s
       FOR UPDATE OF t SKIP LOCKED
), lease AS (
    SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until
){starting},"""
    + _CLAIMED
)
# A named claim may be told the log its claimer holds already (`KnownLog`: the task,
# the epoch of the claim that left it, its last seq; NULLs where none, ADR-0122). If this
# claim is the very next one (epoch + 1: nobody claimed the task in between) and the log
# reaches that seq, only the events after it are read, and no snapshot: the claimer
# folds them on top of what it holds. Otherwise the snapshot and the log after it, as
# ever. The claim's row says which (`known`, in the owner column of part 0).
_FROM_KNOWN = {
    "known": """, known AS (
    SELECT c.id FROM claimed AS c
     WHERE c.id = %(known_id)s::text AND c.owner_epoch = %(known_epoch)s::bigint + 1
       AND c.last_seq >= %(known_seq)s::bigint
)""",
    "unknown": "\n     WHERE NOT EXISTS (SELECT FROM known AS k WHERE k.id = c.id)",
    "known_mark": "CASE WHEN EXISTS (SELECT FROM known AS k WHERE k.id = c.id) THEN 'known' END",
    "after": """CASE WHEN EXISTS (SELECT FROM known AS k WHERE k.id = c.id)
       THEN %(known_seq)s::bigint
       ELSE coalesce((SELECT s.seq FROM snapshot AS s WHERE s.task_id = c.id), 0) END""",
}
CLAIM_NAMED_AND_LOAD = _compact(
    _CLAIM_NAMED_TASKS.format(**_CLAIM_ONLY)
    + _LOAD.format(started="", mark="NULL", started_rows="", **_FROM_KNOWN)
)
# The same, starting the fresh jobs it claims (a canvas's next member), as
# CLAIM_AND_START_JOBS does.
CLAIM_NAMED_AND_START_JOBS = _compact(
    _CLAIM_NAMED_TASKS.format(**_CLAIM_STARTING)
    + _LOAD.format(
        started=_STARTED,
        mark="nullif(c.started, 0)::text",
        started_rows="""
UNION ALL
SELECT 2, s.*, NULL, NULL FROM started AS s""",
        **_FROM_KNOWN,
    )
)

# The same, for one named task (noeta run claims the task it just created).
CLAIM_THIS_TASK = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
       lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease
 WHERE t.id = %(id)s AND t.claimable_at <= clock_timestamp()
   AND (%(offers)s::text[] IS NULL OR t.needs IS NULL OR t.needs <@ %(offers)s::text[])
RETURNING t.id, t.owner_epoch, t.lease_until
"""

# The same walk per queue and priority as the claim, for each first row not yet due.
SECONDS_UNTIL_DUE = """
SELECT extract(epoch FROM min(next.claimable_at) - clock_timestamp())::float8
  FROM (SELECT q.queue, (SELECT t.priority FROM tasks AS t
                          WHERE t.queue = q.queue AND t.claimable_at IS NOT NULL
                          ORDER BY t.priority DESC LIMIT 1) AS top
          FROM unnest(%(queues)s::text[]) AS q(queue) OFFSET 0) AS q
 CROSS JOIN generate_series(q.top, 0, -1) AS p(priority)
 CROSS JOIN LATERAL (
    SELECT claimable_at FROM tasks
     WHERE queue = q.queue AND priority = p.priority AND claimable_at > now()
     ORDER BY claimable_at LIMIT 1
 ) AS next
"""

# A claim index alone answers it: only claimable rows.
COUNT_CLAIMABLE = """
SELECT queue, count(*) FROM tasks
 WHERE claimable_at <= now() AND queue = ANY(%(queues)s::text[])
 GROUP BY queue
"""

# One statement renews every claim of a worker's renewal round. In a queue with settings a
# lapsed lease is not renewed: its slot was free, and may have been taken (ADR-0073).
RENEW_CLAIMS = """
WITH lease AS (SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until)
UPDATE tasks AS t
   SET lease_until = lease.until, claimable_at = lease.until, updated_at = clock_timestamp()
  FROM lease, unnest(%(ids)s::text[], %(epochs)s::bigint[]) AS held(id, epoch)
 WHERE t.id = held.id AND t.owner_epoch = held.epoch AND t.status IN ('running', 'holding')
   AND (t.lease_until > clock_timestamp()
        OR NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = t.queue))
RETURNING t.id, t.owner_epoch, t.lease_until
"""

RELEASE_CLAIM = """
UPDATE tasks
   SET status = 'ready', lease_until = NULL, ready_at = NULL,
       claimable_at = clock_timestamp(), updated_at = clock_timestamp()
 WHERE id = %(id)s AND owner_epoch = %(epoch)s AND status = 'running'
RETURNING id
"""

OWNED_BY = """
SELECT id, owner_epoch, lease_until FROM tasks
 WHERE owner = %(worker)s AND status IN ('running', 'holding') ORDER BY id
"""


class PostgresClaims(PostgresConnection):
    """The claim half of the `Store` protocol."""

    async def claim(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        params = claim_params(worker, queues, lease_seconds, 1, offers=offers)
        row = await self._write(CLAIM_NEXT_TASK, params)
        if row is None:
            return None
        return Claim(row[0], worker, row[1], row[2], taken_over=row[3])

    async def claim_and_load(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        limit: int = 1,
        snapshot_version: str,
        excluding: Collection[str] = (),
        offers: Collection[str] | None = None,
        job_starts: JobStarts | None = None,
        only: Collection[str] | None = None,
        hold: bool = False,
    ) -> list[ClaimedTask]:
        params = claim_params(worker, queues, lease_seconds, limit, excluding, offers)
        params["version"] = snapshot_version
        statement = CLAIM_AND_LOAD
        if hold and job_starts is None and only is None and self.holds_claims:
            return await self._claim_and_hold(statement, params, worker, snapshot_version)
        if job_starts is not None:
            statement = CLAIM_AND_START_JOBS
            params["pinned"] = pinned_data(job_starts)
            params["needs"] = pin_names(job_starts)
        if only is not None:  # a continuation: among the named tasks alone
            params["only"] = list(only)
            params.update(known_params(None))
            named = job_starts is None
            statement = CLAIM_NAMED_AND_LOAD if named else CLAIM_NAMED_AND_START_JOBS
        if only is None and job_starts is not None:
            # The claim loop's claim that starts jobs rides with the finishes in flight
            # (ADR-0116); a plain one goes alone, beside them: riding, it locked an agent
            # drain's runs into groups out of phase, a claim a group (ADR-0140).
            rows = await self._group_commit.claim(
                statement, params, lambda: self._write_generic(statement, params)
            )
        else:
            rows = await self._write_generic(statement, params)
        claimed = claimed_tasks(rows, worker, snapshot_version)
        self._claimed_again(claimed)
        return claimed

    async def _claim_and_hold(
        self, statement: str, params: dict[str, Any], worker: str, version: str
    ) -> list[ClaimedTask]:
        """The idle claim of one agent task, its transaction left open for the run's first
        write (ADR-0136); any other outcome is committed before it is returned."""
        rows, connection = await self._claim_held(statement, params)
        claimed = claimed_tasks(rows, worker, version)
        self._claimed_again(claimed)
        if len(claimed) != 1:
            await self._commit_held(connection)
            return claimed
        (only,) = claimed
        held = self._hold_claim(connection, only.claim.task_id, only.claim.epoch)
        return [ClaimedTask(only.claim, only.loaded, held.durable)]

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        rows = await self._read(SECONDS_UNTIL_DUE, {"queues": list(queues)})
        return max(0.0, rows[0][0]) if rows and rows[0][0] is not None else None

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        rows = await self._read(COUNT_CLAIMABLE, {"queues": list(queues)})
        return {queue: count for queue, count in rows}

    async def claim_task(
        self,
        worker: str,
        task_id: str,
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        check_lease(lease_seconds)
        check_key("worker name", worker)
        offered = None if offers is None else sorted(set(offers))
        params = {"worker": worker, "id": task_id, "lease": lease_seconds, "offers": offered}
        row = await self._write(CLAIM_THIS_TASK, params)
        if row is None:
            return None
        return Claim(task_id=row[0], worker=worker, epoch=row[1], lease_until=row[2])

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        check_lease(lease_seconds)
        if not claims:
            return {}
        by_id = {claim.task_id: claim for claim in claims}
        params = {
            "lease": lease_seconds,
            "ids": [c.task_id for c in claims],
            "epochs": [c.epoch for c in claims],
        }
        # A worker's renewals have a connection of their own: a round never waits for one
        # behind its runs' statements, and its claims' leases do not lapse meanwhile
        # (issue 26, ADR-0139).
        rows = await self._write_many(RENEW_CLAIMS, params, pool=self._renewal_pool)
        return {
            task_id: Claim(task_id, by_id[task_id].worker, epoch, lease_until)
            for task_id, epoch, lease_until in rows
        }

    async def release(self, claim: Claim) -> bool:
        row = await self._write(RELEASE_CLAIM, {"id": claim.task_id, "epoch": claim.epoch})
        return row is not None

    async def owned_by(self, worker: str) -> list[Claim]:
        rows = await self._read(OWNED_BY, {"worker": worker})
        return [Claim(task_id, worker, epoch, lease_until) for task_id, epoch, lease_until in rows]
