"""`noeta scheduler`: fires cron schedules and announces due timers, until SIGTERM."""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from noeta.cli import log_lines
from noeta.cli.health_options import health_options, prepare_health, run_check
from noeta.cli.log_lines import log_level_option
from noeta.cli.options import check_store_url, config_option, store_option
from noeta.core.errors import ConfigError

if TYPE_CHECKING:  # `noeta scheduler --help` reads no cron file
    from noeta.core.ports.store import Store
    from noeta.health.process import ProcessHealth
    from noeta.scheduler.cronfile import Schedule

log = logging.getLogger("noeta.scheduler")


@click.command()
@store_option
@click.option(
    "--cron",
    "cron_files",
    multiple=True,
    metavar="FILE",
    help="A cron file (scheduler/README.md); repeat for several. SIGHUP reloads them.",
)
@config_option
@click.option(
    "--retain",
    default=None,
    metavar="DURATION",
    help="Prune finished tasks older than this (30m, 12h, 7d, 2w) every 15 minutes, as "
    "`noeta db prune --finished-before` does. Default: keep them all.",
)
@health_options
@log_level_option
def scheduler(
    store: str | None,
    cron_files: tuple[str, ...],
    config: str | None,
    retain: str | None,
    health: str | None,
    stuck_after: float,
    check: bool,
    log_level: str,
) -> None:
    """Fire the cron files' schedules, once per slot however many schedulers run, and wake
    idle workers when a timer falls due; with --retain, prune finished tasks. Runs until
    SIGTERM or SIGINT."""
    from noeta.core.ports.retention import parse_duration
    from noeta.scheduler.cronfile import load_cron_files

    retention = parse_duration(retain) if retain is not None else None
    schedules = load_cron_files(cron_files)  # a broken file stops the scheduler here
    check_store_url(store)
    if check:
        run_check(health, store)
    serving = prepare_health(health, store, stuck_after)
    log_lines.configure(log_level)
    from noeta import observability
    from noeta.backends.stores import resolve_url

    observability.add_secrets([resolve_url(store)])
    observability.scrub_logs()  # its log lines, like a worker's, never carry a key or password
    if serving.listening is not None:
        observability.start("noeta-scheduler", secrets=[resolve_url(store)], scraped=True)
    asyncio.run(_serve(store, cron_files, schedules, config, retention, serving))


async def _serve(
    url: str | None,
    cron_files: Sequence[str],
    schedules: list[Schedule],
    config_path: str | None,
    retention: timedelta | None,
    health: ProcessHealth,
) -> None:
    from noeta.backends.stores import configured_session_url, open_store
    from noeta.cli.store_wait import served_when_reachable
    from noeta.config import load_config
    from noeta.plugins.toolbox import Toolbox
    from noeta.scheduler.cronfile import load_cron_files
    from noeta.scheduler.scheduler import Scheduler

    # Started and closed again, as `noeta submit` does: only the tool names are needed.
    config = load_config(config_path)
    toolbox = await Toolbox.open(config)
    try:
        tools_by_plugin = {
            loaded.pin.name: tuple(tool.name for tool in loaded.plugin.tools())
            for loaded in toolbox.plugins
        }
    finally:
        await toolbox.close()
    _check_plugins(schedules, tools_by_plugin)

    def tools_for(plugins: tuple[str, ...] | None) -> tuple[str, ...]:
        names = tools_by_plugin if plugins is None else plugins
        return tuple(tool for name in names for tool in tools_by_plugin[name])

    stop, reload = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_stop() -> None:
        health.readiness.drain()
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_stop)
    # One connection more for a prune, which holds its own for as long as it runs.
    opening = functools.partial(
        open_store,
        url,
        session_url=configured_session_url(config.store_session),
        application_name="noeta-scheduler",
        max_connections=3,
    )
    store = await served_when_reachable(opening, stop, health)  # waits for a server not up
    if store is None:
        log_lines.announce(log, "scheduler: stopped")
        return
    worker = Scheduler(store, schedules, tools_for, liveness=health.liveness)

    def on_hangup() -> None:
        try:
            fresh = load_cron_files(cron_files)
            _check_plugins(fresh, tools_by_plugin)
        except ConfigError as error:
            log.error(
                "cron reload failed; keeping the %d schedules loaded before: %s",
                len(worker.schedules),
                error,
            )
            return
        worker.schedules = fresh
        log.info("cron reloaded: %d schedules", len(fresh))
        reload.set()

    loop.add_signal_handler(signal.SIGHUP, on_hangup)
    log_lines.announce(
        log,
        "scheduler: %d schedules from %s",
        len(schedules),
        ", ".join(cron_files) or "no cron file (timers only)",
    )
    try:
        async with asyncio.TaskGroup() as running:
            running.create_task(worker.run(stop, reload))
            if retention is not None:
                running.create_task(_retain(store, retention, stop))
    finally:
        await health.close()
        await store.close()
    log_lines.announce(log, "scheduler: stopped")


async def _retain(store: Store, older_than: timedelta, stop: asyncio.Event) -> None:
    from noeta.scheduler.retention import Retention

    pruning = store.capabilities.pruning
    if pruning is None:
        log.error("retention: this store (%s) cannot prune", type(store).__name__)
        return
    log.info("retention: pruning tasks finished more than %s ago", older_than)
    await Retention(pruning, older_than).run(stop)


def _check_plugins(schedules: Sequence[Schedule], tools_by_plugin: Mapping[str, object]) -> None:
    from noeta.scheduler.cronfile import TaskAction
    from noeta.scheduler.scheduler import check_job_schedules

    check_job_schedules(schedules)  # the plugins are loaded: their functions are known
    for schedule in schedules:
        action = schedule.action
        if isinstance(action, TaskAction) and action.plugins is not None:
            unknown = sorted(set(action.plugins) - set(tools_by_plugin))
            if unknown:
                raise ConfigError(
                    f"{schedule.source}: schedule {schedule.name!r} names plugins the config "
                    f"does not load: {', '.join(unknown)}"
                )
