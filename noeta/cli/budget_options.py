"""`--max-cost`, `--max-tokens`, `--on-budget`: a task's budget on `noeta submit`
(ADR-0107), each bad value a usage error (one line, exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class UsdAmount(click.ParamType[str]):
    """A positive amount of US dollars, kept as its decimal string (never a float)."""

    name = "USD"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            self.fail(f"{value!r} is not a number of US dollars", param, ctx)
        if not amount.is_finite() or amount <= 0:
            self.fail(f"{value!r} is not more than 0", param, ctx)
        return str(amount)


def budget_options(command: F) -> F:
    for option in reversed(
        (
            click.option(
                "--max-cost",
                type=UsdAmount(),
                default=None,
                help="Its budget in USD over its model calls, at the worker's prices.",
            ),
            click.option(
                "--max-tokens",
                type=click.IntRange(min=1),
                default=None,
                metavar="N",
                help="Its budget in tokens (input of every kind, and output).",
            ),
            click.option(
                "--on-budget",
                type=click.Choice(["fail", "ask"]),
                default="fail",
                show_default=True,
                help="When a call would pass the budget: fail the task, or ask (noeta answer).",
            ),
        )
    ):
        command = option(command)
    return command
