"""The cost page: what the tasks finished in the last days cost, per day (and their
tokens by kind) as charts, and by queue, model and concurrency key as tables, from the
rollup `noeta web` keeps (cost_history.py), priced as `noeta show` prices. A model with
no price, or a reply that said no usage, is unknown, never 0; what requests whose reply
never came may have cost ("possibly billed") is shown apart."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.client.task_costs import counted
from noeta.core.ports.model import Usage
from noeta.core.rules.ledger import Ledger, ModelLedger, combined
from noeta.core.rules.prices import Price, costs_of, format_usd
from noeta.web.charts import Series, stacked_bars
from noeta.web.cost_history import (
    KEPT_DAYS,
    NO_KEY,
    CostHistory,
    CostRow,
    first_kept_day,
    ledger_from,
)
from noeta.web.render import h, link, page, table, url, utc
from noeta.web.site import PageError, Site, whole_number

REFRESH_SECONDS = 10  # live.js reads the page again this often: a walk of what finished since
_REFRESH = f' data-refresh="{REFRESH_SECONDS}"'
COMPUTING = (
    "computing: the tasks finished in the last 30 days are being read (their model "
    "calls only); the figures appear here on their own when they are counted"
)
DIMENSIONS = {"model": "model", "queue": "queue", "key": "concurrency key"}
CHART_GROUPS = 5  # the costliest groups drawn apart in the chart; the rest as "other"
SERIES_CLASSES = tuple(f"series-{n}" for n in range(CHART_GROUPS + 1))
TOKEN_KINDS = (  # (Usage field, the word), stacked from the bottom
    ("input_tokens", "input"),
    ("cache_read_tokens", "cache read"),
    ("cache_write_tokens", "cache write"),
    ("output_tokens", "output"),
)
HEADINGS = (
    "replies",
    "input",
    "cache read",
    "cache write",
    "output",
    "cost",
    "possibly billed",
)


@dataclass
class Figures:
    """What one group of calls (a day, a queue, a model, a key) came to, priced."""

    ledger: Ledger
    known: Decimal = Decimal(0)  # the cost of the replies whose price is known
    unknown: list[str] = field(default_factory=list)  # why the rest is unknown
    priced: int = 0  # the models whose cost is known
    possibly_billed: int = 0
    possibly_billed_input: int = 0
    possibly_billed_cost: Decimal | None = Decimal(0)  # None: a price is unknown

    @property
    def usage(self) -> Usage:
        total = Usage()
        for entry in self.ledger:
            total = total.plus(entry.usage)
        return total

    @property
    def replies(self) -> int:
        return sum(entry.replies for entry in self.ledger)

    @property
    def cost(self) -> str:
        """The cost as the page says it: "unknown" where nothing is known, never 0."""
        if not self.unknown:
            return format_usd(self.known)
        return f"{format_usd(self.known)} + unknown" if self.priced else "unknown"


def figures_of(ledger: Ledger, prices: Mapping[str, Price]) -> Figures:
    figures = Figures(ledger)
    for cost in costs_of(ledger, prices):
        if cost.billed is None:
            figures.unknown.append(cost.unknown_because)
        else:
            figures.known += cost.billed
            figures.priced += 1
        entry = cost.ledger
        if entry.possibly_billed:
            figures.possibly_billed += entry.possibly_billed
            figures.possibly_billed_input += entry.possibly_billed_input
            if cost.possibly_billed is None or figures.possibly_billed_cost is None:
                figures.possibly_billed_cost = None
            else:
                figures.possibly_billed_cost += cost.possibly_billed
    return figures


def grouped(rows: Sequence[CostRow], key: Callable[[CostRow], str]) -> dict[str, Ledger]:
    """Each group's ledger (per model, summed) of `rows`, by `key`."""
    found: dict[str, list[ModelLedger]] = defaultdict(list)
    for row in rows:
        found[key(row)].append(row.ledger)
    return {name: combined([tuple(entries)]) for name, entries in found.items()}


GROUP_KEYS: dict[str, Callable[[CostRow], str]] = {
    "model": lambda row: row.ledger.model,
    "queue": lambda row: row.queue,
    "key": lambda row: row.key,
}


async def cost_page(site: Site, request: Request, history: CostHistory) -> HTMLResponse:
    days = _days(request.query_params.get("days"))
    by = request.query_params.get("by") or "model"
    if by not in DIMENSIONS:
        raise PageError(400, f"by must be one of {', '.join(DIMENSIONS)}, not {by[:40]!r}")
    store = await site.store()
    now = await store.clock()
    caught_up = await history.refresh(await site.views(), now)
    if history.through is None:
        body = f'<div id="figures"><p class="muted filling">{h(COMPUTING)}</p></div>'
        return HTMLResponse(page("Cost", body, status_line=_clock(now), live=_REFRESH))
    prices = await site.client.prices()
    today = now.astimezone(UTC).date()
    first = max(first_kept_day(now), today - timedelta(days=days - 1))
    rows = history.rows(first)
    periods = [first + timedelta(days=n) for n in range((today - first).days + 1)]
    whole = figures_of(combined([tuple(row.ledger for row in rows)]), prices)
    body = _choices(days, by) + _total(whole, days, history.through, caught_up)
    if not rows:
        body += '<p class="muted">no model call in the tasks finished in these days</p>'
    else:
        body += _cost_chart(rows, periods, by, prices) + _token_chart(rows, periods)
        by_day = grouped(rows, lambda row: row.day.isoformat())
        body += "<h2>per day</h2>" + _table("day", by_day, prices, newest_first=True)
        for name, words in DIMENSIONS.items():
            groups = grouped(rows, GROUP_KEYS[name])
            body += f"<h2>by {h(words)}</h2>" + _table(words, groups, prices)
    note = (
        "The model calls of the tasks that finished on each day (UTC), each task's own "
        "(a subtask counts as a task of its own), priced at this server's price table "
        "(noeta.yaml's prices: over the bundled one); a task still running counts when it "
        "finishes. Unknown: a model with no price, or replies that said no usage. Possibly "
        "billed: requests sent whose reply never came, at their estimated input tokens."
    )
    body = f'<div id="figures">{body}</div><p class="muted">{h(note)}</p>'
    return HTMLResponse(page("Cost", body, status_line=_clock(now), live=_REFRESH))


async def listed_cost(site: Site, task_ids: Sequence[str]) -> str:
    """The task list's total: what the tasks it lists cost (each one's own calls)."""
    found = await (await site.views()).ledger_events(task_ids)
    ledger = combined(ledger_from(found.get(task_id, [])) for task_id in task_ids)
    if not ledger:
        return ""
    figures = figures_of(ledger, await site.client.prices())
    said = f"cost of the {counted(len(task_ids), 'task', 'tasks')} listed: {figures.cost}"
    if figures.possibly_billed:
        requests = counted(figures.possibly_billed, "request", "requests")
        said += f"; possibly billed {format_usd(figures.possibly_billed_cost)} ({requests}"
        said += " with no reply)"
    words = "each task's own model calls, the tasks of this page only; by day: "
    about = f'<span class="muted">({h(words)}{link("/cost", "cost")})</span>'
    return f'<p class="list-cost" id="list-cost">{h(said)} {about}</p>'


def _days(text: str | None) -> int:
    if text is None or text == "":
        return KEPT_DAYS
    number = whole_number(text)
    if number is None or not 1 <= number <= KEPT_DAYS:
        raise PageError(400, f"days must be a whole number from 1 to {KEPT_DAYS}, not {text!r}")
    return number


def _choices(days: int, by: str) -> str:
    ranges = []
    for choice in (1, 7, KEPT_DAYS):
        words = "today" if choice == 1 else f"the last {choice} days"
        where = url("/cost", days=choice, by=by)
        ranges.append(f"<b>{h(words)}</b>" if choice == days else link(where, words))
    dimensions = []
    for name, words in DIMENSIONS.items():
        said = f"by {words}"
        where = url("/cost", days=days, by=name)
        dimensions.append(f"<b>{h(said)}</b>" if name == by else link(where, said))
    return f'<p class="ranges">{" · ".join(ranges)} | {" · ".join(dimensions)}</p>'


def _total(whole: Figures, days: int, through: datetime, caught_up: bool) -> str:
    said = f"cost {whole.cost}"
    if whole.possibly_billed:
        said += f"; possibly billed {_possibly(whole)}"
    where = "today" if days == 1 else f"in the last {days} days"
    counted_to = f"tasks finished {where}, counted through {utc(through)}"
    if not caught_up:
        counted_to += " (catching up: more are being read)"
    reasons = f'<p class="muted">{h("; ".join(sorted(set(whole.unknown))))}</p>'
    return (
        f'<p class="cost-total" id="cost-total"><b>{h(said)}</b></p>'
        f'<p class="muted">{h(counted_to)}</p>' + (reasons if whole.unknown else "")
    )


def _possibly(figures: Figures) -> str:
    requests = counted(figures.possibly_billed, "request", "requests")
    cost = format_usd(figures.possibly_billed_cost)
    return f"{requests}, ~{figures.possibly_billed_input:,} input tokens, {cost}"


def _table(
    heading: str, groups: dict[str, Ledger], prices: Mapping[str, Price], newest_first: bool = False
) -> str:
    shown = [(name, figures_of(ledger, prices)) for name, ledger in groups.items()]
    if newest_first:
        shown.sort(key=lambda item: item[0], reverse=True)
    else:
        shown.sort(key=lambda item: (-item[1].known, item[0]))
    rows = []
    for name, figures in shown:
        tokens = figures.usage
        cost = h(figures.cost)
        if figures.unknown:
            cost = f'<span title="{h("; ".join(figures.unknown))}">{cost}</span>'
        rows.append(
            [
                h(name if name != NO_KEY or heading != "concurrency key" else "(no key)"),
                h(f"{figures.replies:,}"),
                h(f"{tokens.input_tokens:,}"),
                h(f"{tokens.cache_read_tokens:,}"),
                h(f"{tokens.cache_write_tokens:,}"),
                h(f"{tokens.output_tokens:,}"),
                cost,
                h(_possibly(figures) if figures.possibly_billed else ""),
            ]
        )
    return table([heading, *HEADINGS], rows, css="costs")


def _cost_chart(
    rows: Sequence[CostRow], periods: Sequence[date], by: str, prices: Mapping[str, Price]
) -> str:
    """Cost per day, the costliest groups of `by` stacked apart, the rest as "other"."""
    key = GROUP_KEYS[by]
    totals = {name: figures_of(ledger, prices).known for name, ledger in grouped(rows, key).items()}
    drawn = sorted(totals, key=lambda name: (-totals[name], name))[:CHART_GROUPS]
    values: dict[str, list[float]] = {name: [0.0] * len(periods) for name in [*drawn, "other"]}
    unknown = [""] * len(periods)
    for row in rows:
        index = (row.day - periods[0]).days
        figures = figures_of((row.ledger,), prices)
        name = key(row) if key(row) in drawn else "other"
        values[name][index] += float(figures.known)
        if figures.unknown:
            unknown[index] = "; plus unknown"
    series = [
        Series(css, name or "(no key)", values[name])
        for css, name in zip(SERIES_CLASSES, [*drawn, "other"], strict=False)
        if any(values[name])
    ]
    label = f"cost per day (UTC) by {DIMENSIONS[by]}, known prices"
    day_names = [day.strftime("%m-%d") for day in periods]
    return stacked_bars(label, day_names, series, _dollars, unknown) + _legend(series)


def _token_chart(rows: Sequence[CostRow], periods: Sequence[date]) -> str:
    values = {kind: [0.0] * len(periods) for kind, _ in TOKEN_KINDS}
    for row in rows:
        index = (row.day - periods[0]).days
        for kind, _ in TOKEN_KINDS:
            values[kind][index] += getattr(row.ledger.usage, kind)
    series = [
        Series(css, word, values[kind])
        for css, (kind, word) in zip(SERIES_CLASSES, TOKEN_KINDS, strict=False)
    ]
    day_names = [day.strftime("%m-%d") for day in periods]
    chart = stacked_bars("tokens per day (UTC) by kind", day_names, series, _tokens)
    return chart + _legend(series)


def _legend(series: Sequence[Series]) -> str:
    parts = "".join(f'<i class="{h(part.css)}"></i>{h(part.name)} ' for part in series)
    return f'<p class="legend">{parts}</p>'


def _dollars(amount: float) -> str:
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}".rstrip("0").rstrip(".")


def _tokens(count: float) -> str:
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count:,.0f}"


def _clock(now: datetime) -> str:
    return h(f"store clock {utc(now)}")
