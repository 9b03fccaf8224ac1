"""`noeta budget`: fleet budgets, the USD a queue (or one concurrency key of it) may spend
on model calls per calendar hour, day or month, across every worker (ADR-0110): set,
list with what each period has spent, clear."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import click

from noeta.cli.limiter import echo_table, open_limiter
from noeta.cli.options import json_option, store_option
from noeta.core.errors import ConfigError
from noeta.core.ports.fleet_budgets import (
    BUDGET_HEADINGS,
    FleetBudget,
    budget_cells,
    check_amount,
    check_scope,
    current_spend,
    scope_name,
)

_scope = click.argument("scope", metavar="QUEUE[/KEY]")


@click.group(name="budget")
def budget() -> None:
    """Fleet budgets: USD a queue (or one key of it) may spend per hour, day or month."""


@budget.command(name="set")
@_scope
@click.option("--per-hour", metavar="USD", help="USD per calendar hour (UTC).")
@click.option("--per-day", metavar="USD", help="USD per calendar day (UTC).")
@click.option("--per-month", metavar="USD", help="USD per calendar month (UTC).")
@store_option
def set_budget(
    scope: str,
    per_hour: str | None,
    per_day: str | None,
    per_month: str | None,
    store: str | None,
) -> None:
    """Budget the model calls of QUEUE's tasks (or of those of QUEUE with concurrency key
    KEY) across every worker. A call that would take a period past its amount is not
    sent: the task fails with budget_exceeded, or waits for `noeta answer ID budget
    allow` with --on-budget ask (raise the budget first, or the call is refused again).
    Periods are calendar hours, days and months in UTC; changing an amount keeps what
    the period has spent."""
    queue, key = check_scope(scope)
    given = {"hour": per_hour, "day": per_day, "month": per_month}
    budgets = [
        FleetBudget(queue, key, period, check_amount(amount, f"--per-{period}"))
        for period, amount in given.items()
        if amount is not None
    ]
    if not budgets:
        raise ConfigError("give --per-hour, --per-day or --per-month (USD)")
    known = asyncio.run(_set(store, budgets))
    for each in budgets:
        click.echo(f"{each.scope}: ${each.amount} per {each.period}")
    if not known:
        click.echo(
            f"note: no task or queue setting names queue {queue!r} yet; the budget is set "
            "and applies to its tasks when they come",
            err=True,
        )


@budget.command(name="clear")
@_scope
@store_option
def clear_budget(scope: str, store: str | None) -> None:
    """Remove QUEUE's budgets (or QUEUE/KEY's), every period."""
    queue, key = check_scope(scope)
    cleared = asyncio.run(_clear(store, queue, key))
    if not cleared:
        raise ConfigError(f"no budget on {scope_name(queue, key)} to clear")
    click.echo(f"{scope_name(queue, key)}: cleared")


@budget.command(name="list")
@json_option
@store_option
def list_budgets(as_json: bool, store: str | None) -> None:
    """Every fleet budget, with what its current period has spent, the calls it let
    through and those it refused."""
    budgets = asyncio.run(_list(store))
    now = datetime.now(UTC)
    if as_json:
        click.echo(json.dumps([_document(each, now) for each in budgets], indent=2))
        return
    if not budgets:
        click.echo("no fleet budgets")
        return
    echo_table([BUDGET_HEADINGS, *(budget_cells(each, now) for each in budgets)])


def _document(each: FleetBudget, now: datetime) -> dict[str, object]:
    return {
        "queue": each.queue,
        "key": each.concurrency_key or None,
        "period": each.period,
        "amount": str(each.amount),
        "spent": str(current_spend(each, now)),
        "calls": each.calls,
        "refused": each.refusals,
    }


async def _set(url: str | None, budgets: list[FleetBudget]) -> bool:
    store, limiter = await open_limiter(url, what="budget")
    try:
        return all([await limiter.set_fleet_budget(each) for each in budgets])
    finally:
        await store.close()


async def _clear(url: str | None, queue: str, key: str) -> int:
    store, limiter = await open_limiter(url, what="budget")
    try:
        return await limiter.clear_fleet_budget(queue, key)
    finally:
        await store.close()


async def _list(url: str | None) -> list[FleetBudget]:
    store, limiter = await open_limiter(url, reads_only=True, what="budget")
    try:
        return await limiter.fleet_budgets()
    finally:
        await store.close()
