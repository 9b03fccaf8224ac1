"""`noeta worker`: the service that claims and runs tasks."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import click

from noeta.cli import bounds, log_lines
from noeta.cli.health_options import health_options, prepare_health, run_check
from noeta.cli.log_lines import log_level_option
from noeta.cli.nondumpable import make_non_dumpable
from noeta.cli.options import check_store_url, config_option, store_option

log = logging.getLogger("noeta.worker")

if TYPE_CHECKING:  # `noeta worker --help` imports neither the worker nor its tools
    from noeta.core.ports.store import Store
    from noeta.health.process import ProcessHealth
    from noeta.worker.settings import WorkerSettings


@click.command()
@store_option
@click.option("--queues", default="default", show_default=True, help="Comma-separated queues.")
@click.option(
    "--concurrency",
    type=bounds.CONCURRENCY,
    default=4,
    show_default=True,
    help="Tasks run at once in this process.",
)
@click.option(
    "--connections",
    type=bounds.CONNECTIONS,
    default=None,
    help="Store connections its runs share, whatever the concurrency (at least"
    f" {bounds.CONNECTIONS_MIN}; default: concurrency + 2, at most"
    f" {bounds.CONNECTIONS_DEFAULT}). It holds 3 more: for its lease renewals, its claims and"
    " its wake-ups.",
)
@click.option(
    "--lease",
    "lease_seconds",
    type=bounds.LEASE,
    default=30.0,
    show_default=True,
    help="Seconds a claim lasts unless renewed (renewed every third).",
)
@config_option
@click.option("--name", default=None, help="This worker's name (default: host-pid).")
@click.option(
    "--poll",
    "poll_seconds",
    type=bounds.POLL,
    default=1.0,
    show_default=True,
    help="Seconds between claim attempts while idle (the safety net under PostgreSQL's wake-ups).",
)
@click.option(
    "--grace",
    "grace_seconds",
    type=bounds.GRACE,
    default=30.0,
    show_default=True,
    help="Seconds a SIGTERM lets running jobs and tool calls finish before their tasks are"
    " handed back (a second SIGTERM hands them back at once). Keep systemd's TimeoutStopSec"
    " or Kubernetes' terminationGracePeriodSeconds a few seconds above it.",
)
@click.option(
    "--unrunnable-after",
    "unrunnable_after",
    type=bounds.UNRUNNABLE_AFTER,
    default=None,
    help="Fail with plugin_missing a task of these queues that has waited this long while"
    " no live worker offered a plugin it needs (default: it waits until one does; 0: now).",
)
@health_options
@log_level_option
def worker(
    store: str | None,
    queues: str,
    concurrency: int,
    connections: int | None,
    lease_seconds: float,
    config: str | None,
    name: str | None,
    poll_seconds: float,
    grace_seconds: float,
    unrunnable_after: float | None,
    health: str | None,
    stuck_after: float,
    check: bool,
    log_level: str,
) -> None:
    """Claim tasks from the queues and run them until SIGTERM or SIGINT."""
    from noeta import observability
    from noeta.core.ports.store import check_key, check_lease
    from noeta.worker.settings import WorkerSettings

    make_non_dumpable()  # first: the tools it runs must not read its environment or memory
    check_lease(lease_seconds)
    check_store_url(store)  # a malformed URL is one line before anything starts or logs
    if check:
        run_check(health, store)
    serving = prepare_health(health, store, stuck_after)
    names = tuple(q.strip() for q in queues.split(",") if q.strip())
    for queue in names or ("",):
        check_key("queue name", queue)
    settings = WorkerSettings(
        name=check_key("worker name", name or f"{socket.gethostname()}-{os.getpid()}"),
        queues=names,
        concurrency=concurrency,
        connections=connections or default_connections(concurrency),
        lease_seconds=lease_seconds,
        poll_seconds=poll_seconds,
        grace_seconds=grace_seconds,
        unrunnable_after=unrunnable_after,
    )
    log_lines.configure(log_level)
    # The format names no caller, thread or process: no record looks them up (the
    # logging HOWTO's "Optimization"; a worker logs two lines a job, 2 us each saved).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    observability.scrub_logs()
    asyncio.run(_serve(settings, store, config, serving))


async def _serve(
    settings: WorkerSettings, url: str | None, config_path: str | None, health: ProcessHealth
) -> None:
    from noeta import observability
    from noeta.backends.models.registry import ProviderRegistry
    from noeta.backends.stores import configured_session_url, resolve_url
    from noeta.config import load_config
    from noeta.core.runner import task_budget
    from noeta.plugins.tool_environment import PASSED_NAMES
    from noeta.plugins.toolbox import Toolbox
    from noeta.worker.worker import Worker

    stop, hand_back = asyncio.Event(), asyncio.Event()
    _stop_on_signals(stop, hand_back, health)
    # A sync function's call runs in the loop's default executor (`asyncio.to_thread`),
    # whose own size, min(32, CPUs + 4), is 6 threads on 2 cores: below the concurrency,
    # and shared with the loop's DNS lookups. A thread for every run, and that besides.
    threads = settings.concurrency + min(32, (os.cpu_count() or 1) + 4)
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(threads, thread_name_prefix="noeta-worker")
    )
    config = load_config(config_path)
    session_url = configured_session_url(config.store_session)
    scraped = health.listening is not None
    observability.start("noeta-worker", secrets=[resolve_url(url), session_url], scraped=scraped)
    task_budget.price_with(config.prices)  # budgets' and the cost counter's
    toolbox = await Toolbox.open(config, runs_tools=True)
    observability.add_passed_secrets(PASSED_NAMES)  # what its tools may print
    providers = ProviderRegistry()
    store = await _opened_store(settings, url, session_url, health, stop)
    if store is None:  # stopped while it waited for the server
        await toolbox.close()
        log_lines.announce(log, "worker %s: stopped", settings.name)
        return
    runner = toolbox.runner(store, providers)
    log_lines.announce(
        log,
        "worker %s: queues %s, concurrency %d, %d connections, lease %g s, plugins %s",
        settings.name,
        ",".join(settings.queues),
        settings.concurrency,
        settings.connections,
        settings.lease_seconds,
        ", ".join(p.pin.name for p in toolbox.plugins),
    )
    worker = Worker(store, runner, settings, health.liveness)
    # Who follows which task's stream, kept current by the readers' announcements: a
    # task nobody follows then costs no statement (ADR-0105).
    following = asyncio.ensure_future(runner.streams.listen()) if runner.streams else None
    try:
        await worker.run(stop, hand_back)
    finally:
        if following is not None:
            following.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await following
        await health.close()
        await providers.close()
        await store.close()
        await toolbox.close()
        observability.shutdown()  # export what is queued
    log_lines.announce(log, "worker %s: stopped", settings.name)
    if worker.cut_off:
        # A sync function cut off may run on in its thread, which nothing can stop and
        # asyncio.run would wait for: its task is handed back, so leave without it.
        logging.shutdown()
        os._exit(0)


async def _opened_store(
    settings: WorkerSettings,
    url: str | None,
    session_url: str | None,
    health: ProcessHealth,
    stop: asyncio.Event,
) -> Store | None:
    """The worker's store, once PostgreSQL can be reached (ADR-0157: the health server
    answers meanwhile, alive and not ready); None if the worker is stopped first."""
    from noeta.backends.stores import open_store
    from noeta.cli.store_wait import served_when_reachable
    from noeta.observability import metrics, observed
    from noeta.worker.append_journal import journaled

    # A few connections whatever the concurrency: a run's writes go in shared rounds,
    # and it holds none across a model call or a tool run (ADR-0139). Its rounds and its
    # renewals have their own, never waiting behind its runs (issue 26).
    opening = functools.partial(
        open_store,
        url,
        session_url=session_url,
        application_name=f"noeta-worker:{settings.name}"[:63],
        max_connections=settings.connections,
        min_connections=settings.connections,  # open before the first claim, not under its runs
        for_worker=True,
    )
    opened = await served_when_reachable(opening, stop, health)
    if opened is None:
        return None
    store = observed(journaled(opened))

    async def measure() -> None:  # the queue and limit gauges, when a scrape asks
        await metrics.measure_queue_depth(store, settings.queues)
        await metrics.measure_model_limits(store)

    health.read_gauges_with(measure)
    return store


def default_connections(concurrency: int) -> int:
    """Concurrency + 2 as before for a small worker, capped: above a few, more runs queue
    for a statement's milliseconds on the pool rather than each holding a connection."""
    return max(bounds.CONNECTIONS_MIN, min(concurrency + 2, bounds.CONNECTIONS_DEFAULT))


def _stop_on_signals(stop: asyncio.Event, hand_back: asyncio.Event, health: ProcessHealth) -> None:
    """SIGTERM or SIGINT: claim nothing more (and be not ready first); a second: hand the
    running tasks back now; a third: leave at once."""

    def on_signal() -> None:
        said = log.info
        if hand_back.is_set():
            os._exit(1)  # a third signal: leave at once; leases will lapse
        if stop.is_set():
            said("stopping: handing running tasks back now")
            hand_back.set()
            return
        said("stopping: claiming nothing more; running steps may finish (--grace)")
        health.readiness.drain()  # not ready before it stops claiming
        stop.set()

    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal)
