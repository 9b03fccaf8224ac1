"""The peers' side of bench/peers.py: reset, bulk enqueue, worker and pickup probe for
Procrastinate, PgQueuer and DBOS (run under the peers' own venv, never noeta's), and the
same for noeta's agent task and plain job (run under noeta's venv; their worker is a
real `noeta worker`).

Ported from the perf-anchor harness (shared/peers-bench/py/peers.py and noeta_peer.py):
each job is a no-op that records "t0 t_start" in a file (noeta: the first durable step,
PluginsPinned, read from its log). One subcommand per process; the peer's database URL is
in $PEER_URL (never on a command line); the result is one line `RESULT <json>`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

URL = os.environ.get("PEER_URL", "")
QUEUE = "bench"
GAP = (0.02, 0.5)  # a random idle pause between probes: no phase lock with any poll timer
RECORD: dict[str, int] = {}


def record_start(t0: float) -> None:
    """Append 't0 t_start' for one job start (O_APPEND: safe across processes)."""
    if "fd" in RECORD:
        os.write(RECORD["fd"], f"{t0!r} {time.time()!r}\n".encode())


def run_sql(statement: str) -> None:
    import psycopg

    with psycopg.connect(URL, autocommit=True) as connection:
        connection.execute(statement)


# Procrastinate ------------------------------------------------------------------------
def procrastinate_app() -> tuple[Any, Any]:
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=URL))

    @app.task(name="noop", queue=QUEUE)
    async def noop(t0: float = 0.0) -> None:
        record_start(t0)

    return app, noop


async def procrastinate_reset() -> None:
    run_sql("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
    app, _ = procrastinate_app()
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def procrastinate_enqueue(count: int, future: bool) -> None:
    app, noop = procrastinate_app()
    async with app.open_async():
        deferrer = noop.configure(schedule_in={"days": 1}) if future else noop.configure()
        for first in range(0, count, 5000):
            await deferrer.batch_defer_async(*[{"t0": 0.0}] * min(5000, count - first))


async def procrastinate_worker(concurrency: int, index: int) -> None:
    app, _ = procrastinate_app()
    async with app.open_async():  # SIGTERM stops the worker gracefully
        await app.run_worker_async(
            queues=[QUEUE], concurrency=concurrency or 10, name=f"w{index}", delete_jobs="never"
        )


async def procrastinate_probe(count: int, record: str) -> dict[str, list[float]]:
    app, noop = procrastinate_app()
    async with app.open_async():
        return await probe(lambda t0: noop.defer_async(t0=t0), count, record)


# PgQueuer -----------------------------------------------------------------------------
async def pgqueuer_queries() -> tuple[Any, Any]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(URL)
    return connection, Queries(AsyncpgDriver(connection))


async def pgqueuer_reset() -> None:
    run_sql("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public")
    connection, queries = await pgqueuer_queries()
    await queries.install()
    await connection.close()


async def pgqueuer_enqueue(count: int, future: bool) -> None:
    from datetime import timedelta

    connection, queries = await pgqueuer_queries()
    for first in range(0, count, 5000):
        k = min(5000, count - first)
        later = [timedelta(days=1)] * k if future else None
        await queries.enqueue(["noop"] * k, [b"0"] * k, [0] * k, execute_after=later)
    await connection.close()


async def pgqueuer_worker(concurrency: int, _index: int) -> None:
    import asyncpg
    from pgqueuer import PgQueuer

    connection = await asyncpg.connect(URL)
    queuer = PgQueuer.from_asyncpg_connection(connection)

    @queuer.entrypoint("noop")
    async def noop(job: Any) -> None:
        record_start(float(job.payload or b"0"))

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, queuer.shutdown.set)
    # Its defaults: batches of 10, unlimited concurrency, LISTEN/NOTIFY and a 30 s poll.
    await queuer.run(**({"max_concurrent_tasks": concurrency} if concurrency else {}))
    await connection.close()


async def pgqueuer_probe(count: int, record: str) -> dict[str, list[float]]:
    connection, queries = await pgqueuer_queries()
    try:
        return await probe(lambda t0: queries.enqueue("noop", repr(t0).encode()), count, record)
    finally:
        await connection.close()


# DBOS ---------------------------------------------------------------------------------
def dbos_launch(executor: str) -> Any:
    from dbos import DBOS

    DBOS(
        config={
            "name": "bench",
            "system_database_url": URL,
            "log_level": "WARNING",
            "executor_id": executor,
        }
    )

    @DBOS.workflow(name="noop_wf")
    def noop_wf(t0: float = 0.0) -> int:
        record_start(t0)
        return 0

    return DBOS


def dbos_reset() -> None:
    dbos = dbos_launch("reset")
    dbos.launch()  # creates the schema on first use
    dbos.destroy()
    run_sql("TRUNCATE dbos.workflow_status CASCADE; TRUNCATE dbos.operation_outputs CASCADE")


def dbos_enqueue(count: int, future: bool) -> None:
    import sqlalchemy
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=URL, application_name="bench")
    options: Any = {"queue_name": QUEUE, "workflow_name": "noop_wf"}
    if future:
        # One DELAYED workflow through the API, cloned in SQL (the API writes a row a call).
        workflow = client.enqueue({**options, "delay_seconds": 86400}, 0.0).get_workflow_id()
        copy = """
        DO $$ DECLARE cols text; picks text; BEGIN
          SELECT string_agg(quote_ident(column_name), ', ' ORDER BY ordinal_position),
                 string_agg(CASE WHEN column_name = 'workflow_uuid'
                                 THEN 'w.workflow_uuid || ''-'' || g'
                                 ELSE 'w.' || quote_ident(column_name) END, ', '
                            ORDER BY ordinal_position)
            INTO cols, picks FROM information_schema.columns
           WHERE table_schema = 'dbos' AND table_name = 'workflow_status';
          EXECUTE format('INSERT INTO dbos.workflow_status (%s) SELECT %s FROM'
                         ' dbos.workflow_status w, generate_series(1, %s) g'
                         ' WHERE w.workflow_uuid = %L', cols, picks, {count}, '{workflow}');
        END $$"""
        run_sql(copy.replace("{count}", str(count - 1)).replace("{workflow}", workflow))
    else:
        engine = sqlalchemy.create_engine(URL.replace("postgresql://", "postgresql+psycopg://"))
        for first in range(0, count, 1000):
            with engine.begin() as connection:
                for _ in range(min(1000, count - first)):
                    client.enqueue_in_transaction(connection, options, 0.0)
        engine.dispose()
    client.destroy()


def dbos_worker(concurrency: int, index: int) -> None:
    import threading

    dbos = dbos_launch(f"worker-{index}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    dbos.launch()
    dbos.register_queue(
        QUEUE,
        worker_concurrency=concurrency or None,
        polling_interval_sec=1.0,
        on_conflict="always_update",
    )
    stop.wait()
    dbos.destroy(workflow_completion_timeout_sec=5)


async def dbos_probe(count: int, record: str) -> dict[str, list[float]]:
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=URL, application_name="bench")
    options: Any = {"queue_name": QUEUE, "workflow_name": "noop_wf"}
    try:
        return await probe(lambda t0: asyncio.to_thread(client.enqueue, options, t0), count, record)
    finally:
        client.destroy()


# The probe -----------------------------------------------------------------------------
def lines(path: str) -> int:
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as file:
        return file.read().count(b"\n")
    return 0


def start_at(record: str, line: int) -> float:
    with open(record) as file:
        return float(file.read().splitlines()[line].split()[1])


async def probe(
    enqueue: Callable[[float], Awaitable[Any]], count: int, record: str, within: float = 60
) -> dict[str, list[float]]:
    """Enqueue one job, wait until the idle worker recorded its start, pause, repeat:
    pickup = the start - the moment the enqueue returned."""
    pickup: list[float] = []
    base = lines(record)
    deadline = time.time() + within
    for n in range(count):
        await enqueue(time.time())
        enqueued = time.time()
        while lines(record) < base + n + 1:
            if time.time() > deadline:
                return {"pickup_ms": pickup}
            await asyncio.sleep(0.0005)
        pickup.append((start_at(record, base + n) - enqueued) * 1000)
        await asyncio.sleep(random.uniform(*GAP))
    return {"pickup_ms": pickup}


def main() -> None:
    made = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    made.add_argument("command", choices=["reset", "enqueue", "worker", "probe"])
    made.add_argument("--peer", required=True)
    made.add_argument("--n", type=int, default=1000)
    made.add_argument("--future", action="store_true")
    made.add_argument("--concurrency", type=int, default=0)
    made.add_argument("--index", type=int, default=0)
    made.add_argument("--record", default="")
    options = made.parse_args()
    if options.record and options.command == "worker":
        RECORD["fd"] = os.open(options.record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if options.peer in PEERS:
        step = PEERS[options.peer][options.command]
    else:  # noeta's own steps import noeta: only under noeta's venv
        from peer_noeta import NOETA, NOETA_JOB

        step = (NOETA_JOB if options.peer.startswith("noeta-job") else NOETA)[options.command]
    if options.command == "reset":
        outcome = step()
    elif options.command == "enqueue":
        outcome = step(options.n, options.future)
    elif options.command == "worker":
        outcome = step(options.concurrency, options.index)
    else:
        outcome = step(options.n, options.record)
    if asyncio.iscoroutine(outcome):
        outcome = asyncio.run(outcome)
    print("RESULT " + json.dumps(outcome))


PEERS: dict[str, dict[str, Callable[..., Any]]] = {
    "procrastinate": {
        "reset": procrastinate_reset,
        "enqueue": procrastinate_enqueue,
        "worker": procrastinate_worker,
        "probe": procrastinate_probe,
    },
    "pgqueuer": {
        "reset": pgqueuer_reset,
        "enqueue": pgqueuer_enqueue,
        "worker": pgqueuer_worker,
        "probe": pgqueuer_probe,
    },
    "dbos": {
        "reset": dbos_reset,
        "enqueue": dbos_enqueue,
        "worker": dbos_worker,
        "probe": dbos_probe,
    },
}

if __name__ == "__main__":
    main()
