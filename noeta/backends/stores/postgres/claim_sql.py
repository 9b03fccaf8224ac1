"""The claim statements on PostgreSQL: the due walk (full, and lean for a claimer whose
queues have no settings: ADR-0144), the named claims, what each claim loads and starts,
renewals, releases and what is due or owned. `claims.py` sends them."""

from __future__ import annotations

from noeta.backends.stores.postgres.compact_sql import compact

# The claim itself, of the rows `due` picked (the due walk's, or the named ones'), with a
# job claim's fresh-job check beside each (`_STARTING`).
_CLAIMED = """ claimed AS (
    UPDATE tasks AS t
       SET status = 'running', owner = %(worker)s, owner_epoch = t.owner_epoch + 1,
           lease_until = lease.until, claimable_at = lease.until,
           updated_at = clock_timestamp(){start_row}
      FROM due, lease
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
# the parameters. Hence `d`'s constant LIMIT, which bounds the planner's estimate of
# `due` (a LIMIT parameter is estimated at a tenth of the rows); the update finds its rows
# by primary key (ANY(ARRAY(...))), never by a hash of `tasks`; and the reads of events,
# snapshots and inbox rows are LATERAL subqueries behind OFFSET 0, which the planner
# cannot turn into a hash join over the whole table.
_CLAIM_DUE_TASKS = (
    """
WITH due AS MATERIALIZED (SELECT {due_columns} FROM (
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
     ) AS found{limited}
     ORDER BY 2 DESC, 3
     LIMIT %(limit)s) AS d{starting} LIMIT 1000
), lease AS (
    SELECT clock_timestamp() AS at, clock_timestamp() + make_interval(secs => %(lease)s) AS until
),"""
    + _CLAIMED
    + "{charged}"
)
# The queues with settings, through noeta_claimable_under_limits, and their rate charged.
_LIMITED = """
    UNION ALL
    SELECT limited.*, true
      FROM (SELECT s.queue FROM queue_settings AS s
             WHERE s.queue = ANY(%(queues)s::text[]) ORDER BY s.queue OFFSET 0) AS q,
           noeta_claimable_under_limits(q.queue, %(limit)s, false, %(offers)s::text[]) AS limited
     WHERE limited.id <> ALL(%(excluding)s::text[])"""
_CHARGED = """, charged AS (
    UPDATE queue_settings AS s
       SET rate_tokens = least(s.rate_count::float8, coalesce(s.rate_tokens, s.rate_count)
               + extract(epoch FROM lease.at - coalesce(s.rate_at, lease.at))
                 * s.rate_count / s.rate_seconds) - took.n,
           rate_at = lease.at
      FROM (SELECT c.queue, count(*) AS n FROM claimed AS c WHERE c.limited GROUP BY c.queue)
           AS took, lease
     WHERE s.queue = took.queue AND s.rate_count IS NOT NULL
)"""
_WITH_SETTINGS = {"limited": _LIMITED, "charged": _CHARGED}
# The lean claim (ADR-0144): for a claimer none of whose queues has settings, the due walk
# alone. A queue with settings is still skipped by the walk's NOT EXISTS, so its limits are
# never bypassed; the statement says it saw one with a row of part 4 (`settings_seen`), and
# its claimer sends the full statement from then on, at once.
_LEAN = {"limited": "", "charged": ""}
_SETTINGS_ROW = """
UNION ALL
SELECT 4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
 WHERE EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = ANY(%(queues)s::text[]))"""

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
# Joined to each due row inside `due`, which is materialised: the check runs once a due
# row whatever join the update makes. As a CTE of its own, inlined into the update's join,
# a generic plan ran it again for every claimed row (a claim of 25: 625 probes, 14-20 ms
# instead of about 1; ADR-0145).
_STARTING = """
      LEFT JOIN LATERAL (
    SELECT j.data AS call,
           CASE WHEN k.data::jsonb = %(pinned)s::jsonb THEN 1 ELSE 2 END AS events
      FROM (SELECT j.data FROM events j
             WHERE j.task_id = d.id AND j.seq = 2 AND j.type = 'CallRequested' OFFSET 0) AS j
      LEFT JOIN (SELECT k.type, k.data FROM events k
                  WHERE k.task_id = d.id AND k.seq = 3 OFFSET 0) AS k ON true
     WHERE NOT d.taken_over
       AND CASE WHEN k.type IS NULL THEN true WHEN k.type <> 'PluginsPinned' THEN false
           WHEN k.data::jsonb = %(pinned)s::jsonb THEN true
           ELSE ARRAY(SELECT x->>0 FROM json_array_elements(k.data::json->'pins') x)
                <@ %(needs)s::text[] END
       AND NOT (SELECT EXISTS (SELECT FROM events WHERE task_id = d.id AND seq > 3
                                 AND type <> 'SubtaskOf'))
       AND NOT (SELECT EXISTS (SELECT FROM inbox WHERE task_id = d.id AND taken_seq IS NULL))
      ) AS s ON true"""
# The claim's own update of a started job's row: its log's end, and its needs from the
# pin it wrote, as the appends write them (0025).
_START_ROW = """,
           last_seq = t.last_seq + coalesce(due.events, 0),
           needs = CASE WHEN due.events = 2 THEN %(needs)s::text[] ELSE t.needs END"""


_CLAIM_ONLY = {"due_columns": "*", "starting": "", "start_row": "", "start_returns": ""}
_CLAIM_STARTING = {
    "due_columns": "d.*, s.events, s.call",
    "starting": _STARTING,
    "start_row": _START_ROW,
    "start_returns": ", coalesce(due.events, 0) AS started, due.call",
}

CLAIM_NEXT_TASK = f"""{_CLAIM_DUE_TASKS.format(**_CLAIM_ONLY, **_WITH_SETTINGS)}
SELECT id, owner_epoch, lease_until, taken_over FROM claimed
"""

# The claim and, in the same statement, what each claimed task's run reads first: its
# snapshot of this version, the log after it, its untaken inbox. Rows of four parts (0
# claim, 1 snapshot, 2 event, 3 inbox entry; a lean claim's 4: `_SETTINGS_ROW`) in one
# shape; the reads see the statement's snapshot, so an append committed after it began
# (a lapsed owner's, just before the claim locked the row) is missing: the client sees
# the log end short of last_seq and loads that task again.
_LOAD = """{known}, snapshot AS (
    SELECT s.* FROM claimed AS c,
           LATERAL (SELECT s.task_id, s.seq, s.data FROM snapshots AS s
                          WHERE s.task_id = c.id AND s.version = %(version)s OFFSET 0) AS s{unknown}
){started}
SELECT 0, c.id, c.last_seq, c.owner_epoch, {mark}, NULL, c.lease_until, {known_mark},
       c.taken_over, NULL
  FROM claimed AS c{held}
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
                OFFSET 0) AS i{started_rows}{settings_row}
 ORDER BY 1, 2, 3
"""
# Where the events read start: after the snapshot read, if any.
_FROM_SNAPSHOT = {
    "known": "",
    "unknown": "",
    "known_mark": "NULL",
    "after": "coalesce((SELECT s.seq FROM snapshot AS s WHERE s.task_id = c.id), 0)",
    "held": "",
}
# A claim held open for its runs' first writes (ADR-0136, ADR-0147) bounds its own
# transaction: PostgreSQL ends it (and its session) this long after the claim, so a frozen
# worker (SIGSTOP, a debugger) holds the tasks' rows no longer and the claim never
# happened. transaction_timeout (PostgreSQL 17+), not idle_in_transaction_session_timeout:
# psycopg ends a pipeline with a Flush message after its Sync, and the server disarms the
# idle timer as it reads that message and arms it again only at the next Sync (measured:
# a session left idle in a pipelined BEGIN lived on; docs/scaling.md). Set by the claim's
# own statement, once a row is claimed (a claim of none commits at once): a SET LOCAL
# of its own was one more statement in the pipeline the worker builds for every hold.
TRANSACTION_TIMEOUT = "2s"
_HOLD = f"\n WHERE set_config('transaction_timeout', '{TRANSACTION_TIMEOUT}', true) <> ''"


def _claim_and_load(lean: bool, *, held: bool = False) -> str:
    due = _CLAIM_DUE_TASKS.format(**_CLAIM_ONLY, **(_LEAN if lean else _WITH_SETTINGS))
    settings_row = _SETTINGS_ROW if lean else ""
    load = {**_FROM_SNAPSHOT, "held": _HOLD} if held else _FROM_SNAPSHOT
    return compact(
        due
        + _LOAD.format(started="", mark="NULL", started_rows="", settings_row=settings_row, **load)
    )


CLAIM_AND_LOAD = _claim_and_load(lean=False)
LEAN_CLAIM_AND_LOAD = _claim_and_load(lean=True)
# The same, its transaction left open and bounded (`TRANSACTION_TIMEOUT`), to be held.
HELD_CLAIM_AND_LOAD = _claim_and_load(lean=False, held=True)
LEAN_HELD_CLAIM_AND_LOAD = _claim_and_load(lean=True, held=True)

# The same, starting the fresh jobs it claims (ADR-0101): their events written in the
# claim's statement and commit, read back with the rest of the log (the statement's own
# reads do not see its inserts). The ToolStarted's data is the CallRequested's, less its
# retry_of, plus an empty trace: both encodings keep their fields in order (events.py),
# and a job's input is an object, so its text ends "}}" where no retry_of follows it.
# RETURNING names a part 2 row's columns in order: they are read back as `s.*`. No SQL
# comment in here: the statement is sent on one line (`compact`).
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


# Compacted (`compact`): psycopg parses a statement longer than 4,096 bytes again at every
# execute (its cache's limit), and this one is that long with its layout.
# What a claim that starts jobs loads besides: the events it wrote.
_STARTED_LOAD = {
    "started": _STARTED,
    "mark": "nullif(c.started, 0)::text",
    "started_rows": """
UNION ALL
SELECT 2, s.*, NULL, NULL FROM started AS s""",
}


def _claim_and_start_jobs(lean: bool) -> str:
    due = _CLAIM_DUE_TASKS.format(**_CLAIM_STARTING, **(_LEAN if lean else _WITH_SETTINGS))
    return compact(
        due
        + _LOAD.format(
            **_STARTED_LOAD, settings_row=_SETTINGS_ROW if lean else "", **_FROM_SNAPSHOT
        )
    )


CLAIM_AND_START_JOBS = _claim_and_start_jobs(lean=False)
LEAN_CLAIM_AND_START_JOBS = _claim_and_start_jobs(lean=True)

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
WITH due AS MATERIALIZED (SELECT {due_columns} FROM (
    SELECT t.id, t.status IN ('running', 'holding') AS taken_over, false AS limited
      FROM tasks AS t
     WHERE t.id = ANY(%(only)s::text[]) AND t.claimable_at <= clock_timestamp()
       AND t.queue = ANY(%(queues)s::text[]) AND t.id <> ALL(%(excluding)s::text[])
       AND (%(offers)s::text[] IS NULL OR t.needs IS NULL OR t.needs <@ %(offers)s::text[])
       AND NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = t.queue)
     ORDER BY t.id
     LIMIT %(limit)s
       FOR UPDATE OF t SKIP LOCKED) AS d{starting}
), lease AS (
    SELECT clock_timestamp() + make_interval(secs => %(lease)s) AS until
),"""
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
    "held": "",
}
CLAIM_NAMED_AND_LOAD = compact(
    _CLAIM_NAMED_TASKS.format(**_CLAIM_ONLY)
    + _LOAD.format(started="", mark="NULL", started_rows="", settings_row="", **_FROM_KNOWN)
)
# The same, starting the fresh jobs it claims (a canvas's next member), as
# CLAIM_AND_START_JOBS does.
CLAIM_NAMED_AND_START_JOBS = compact(
    _CLAIM_NAMED_TASKS.format(**_CLAIM_STARTING)
    + _LOAD.format(**_STARTED_LOAD, settings_row="", **_FROM_KNOWN)
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
