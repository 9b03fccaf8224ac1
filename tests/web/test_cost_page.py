"""The cost page over HTTP on a real PostgreSQL store: its figures are the ledger's sums
(`noeta show`'s) of the tasks finished in its days, by day, queue, model and key; a model
with no price is unknown, never 0; a request without a reply is "possibly billed", apart;
the rollup reads each finished task once; its bad input; and the task list's total."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.ports.model import Text, Usage
from noeta.core.ports.store import Finish, NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.ledger import Ledger, combined, ledger_of
from noeta.core.rules.prices import BUNDLED, costs_of, format_usd, total_cost
from noeta.web import cost_history
from noeta.web.cost_history import ledger_from
from noeta.web.cost_pages import COMPUTING
from noeta.web.render import h
from tests.web.conftest import encoded

PRICED = "anthropic:claude-sonnet-4-5"
# Text that looks like a reply's fields, inside the reply's own text: the page must read
# the reply's usage, not this (a long reply leaves the store as its opening and end).
# A model the bundled table does not price (a scripted one is free: a known $0).
UNPRICED = "openai:my-finetune"
DECOY = 'x,"usage":{"input_tokens":999999},"model":"openai:gpt-5",' * 200


@pytest.fixture(autouse=True)
def whole_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each page waits for the walk, and counts what finished a moment ago."""
    monkeypatch.setattr(cost_history, "WAIT_SECONDS", 60.0)
    monkeypatch.setattr(cost_history, "SETTLE_SECONDS", 0.0)


def reply(input_tokens: int, output_tokens: int, **more: int) -> events.ModelReplied:
    usage = Usage(input_tokens, output_tokens, **more)
    return events.ModelReplied((Text("done"),), "end_turn", usage)


async def finished_task(
    store: Store,
    task_id: str,
    model: str,
    happened: Sequence[events.Event],
    *,
    queue: str = "default",
    key: str | None = None,
    prompt: str = "count",
    finish: bool = True,
) -> None:
    created = encoded(events.TaskCreated(model=model, prompt=prompt))
    task = NewTask(task_id, created, queue=queue, concurrency_key=key)
    assert await store.create_task(task)
    claim = await store.claim_task("worker-a", task_id, 30)
    assert claim is not None
    if finish:
        ended = [*happened, events.TaskFinished("done", "ok")]
        await store.append(claim, 1, encoded(*ended), next_state=Finish())
    else:
        await store.append(claim, 1, encoded(*happened))


async def known_tasks(store: Store) -> None:
    """Two models (one without a price), two queues, two keys and none, a possibly
    billed request, a long prompt and a long reply; and a running task, not counted."""
    long_reply = events.ModelReplied((Text(DECOY),), "end_turn", Usage(700, 70, 7, 0))
    await finished_task(
        store,
        "research-1",
        PRICED,
        [
            events.ModelCalled("a" * 64, input_estimate=900),
            reply(1000, 200, cache_read_tokens=300, cache_write_tokens=50),
            events.ModelCalled("b" * 64, input_estimate=500),
            events.ModelCallCut(1, "worker_lost"),
            events.ModelCalled("c" * 64, input_estimate=800),
            long_reply,
        ],
        queue="research",
        key="tenant-a",
        prompt="p" * 10_000,
    )
    await finished_task(
        store,
        "research-2",
        PRICED,
        [events.ModelCalled("d" * 64, input_estimate=2000), reply(2000, 100)],
        queue="research",
        key="tenant-b",
    )
    await finished_task(
        store,
        "mail-1",
        UNPRICED,
        [events.ModelCalled("e" * 64, input_estimate=10), reply(10, 5)],
        queue="mail",
    )
    await finished_task(
        store,
        "still-running",
        PRICED,
        [events.ModelCalled("f" * 64, input_estimate=50), reply(50_000, 5_000)],
        queue="research",
        key="tenant-a",
        finish=False,
    )


async def ledger_of_tasks(url: str, task_ids: Sequence[str]) -> Ledger:
    """The ledger `noeta show` sums for each task, combined: the figures to match."""
    client = AsyncClient(url)
    try:
        usages = [await client.usage(task_id) for task_id in task_ids]
    finally:
        await client.close()
    return combined(tuple(cost.ledger for cost in usage.costs) for usage in usages)


def section(page: str, heading: str) -> str:
    found = re.search(rf"<h2>{re.escape(heading)}</h2>(.*?)</table>", page, re.S)
    assert found is not None, page
    return found.group(1)


def cells(page: str, heading: str, name: str) -> list[str]:
    """The text of the cells of `name`'s row under the heading `heading`."""
    for row in re.findall(r"<tr>(.*?)</tr>", section(page, heading), re.S):
        texts = [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", row)]
        if texts and texts[0] == h(name):
            return texts
    raise AssertionError(f"no row {name!r} under {heading!r}")


def expected_cells(ledger: Ledger) -> list[str]:
    """A row's figures as the ledger and the price table give them."""
    [entry] = ledger
    [cost] = costs_of(ledger, BUNDLED)
    usage = entry.usage
    said = [
        f"{entry.replies:,}",
        f"{usage.input_tokens:,}",
        f"{usage.cache_read_tokens:,}",
        f"{usage.cache_write_tokens:,}",
        f"{usage.output_tokens:,}",
        format_usd(cost.billed),
    ]
    if entry.possibly_billed:
        requests = (
            "1 request" if entry.possibly_billed == 1 else f"{entry.possibly_billed} requests"
        )
        tokens = f"~{entry.possibly_billed_input:,} input tokens"
        said.append(f"{requests}, {tokens}, {format_usd(cost.possibly_billed)}")
    else:
        said.append("")
    return said


async def test_the_cost_page_shows_the_ledgers_sums_by_model_queue_and_key(
    store: Store, postgres_url: str, web: Callable[..., TestClient]
) -> None:
    await known_tasks(store)
    page = web().get("/cost")
    assert page.status_code == 200, page.text
    text = page.text

    research = await ledger_of_tasks(postgres_url, ["research-1", "research-2"])
    mail = await ledger_of_tasks(postgres_url, ["mail-1"])
    tenant_a = await ledger_of_tasks(postgres_url, ["research-1"])
    tenant_b = await ledger_of_tasks(postgres_url, ["research-2"])
    [priced] = research
    assert priced.replies == 3 and priced.possibly_billed == 1  # the task itself is as built
    assert priced.usage == Usage(3700, 370, 307, 50)  # the long reply's own usage, not the decoy

    assert cells(text, "by model", PRICED)[1:] == expected_cells(research)
    assert cells(text, "by queue", "research")[1:] == expected_cells(research)
    assert cells(text, "by concurrency key", "tenant-a")[1:] == expected_cells(tenant_a)
    assert cells(text, "by concurrency key", "tenant-b")[1:] == expected_cells(tenant_b)
    # The model without a price: its tokens counted, its cost unknown, never 0.
    unpriced = cells(text, "by model", UNPRICED)
    assert unpriced[1:6] == ["1", "10", "0", "0", "5"] and unpriced[6] == "unknown"
    assert cells(text, "by queue", "mail")[6] == "unknown"
    assert cells(text, "by concurrency key", "(no key)")[6] == "unknown"
    assert "still-running" not in text and "50,000" not in text

    # The whole: the priced model's cost plus unknown; the possibly billed apart.
    known = total_cost(costs_of(research, BUNDLED))
    assert known is not None and known > 0
    total = re.search(r'<p class="cost-total" id="cost-total"><b>(.*?)</b>', text)
    assert total is not None
    [possibly] = [
        cost.possibly_billed for cost in costs_of(research + mail, BUNDLED) if cost.billed
    ]
    assert total.group(1) == h(
        f"cost {format_usd(known)} + unknown; possibly billed 1 request, ~500 input tokens, "
        f"{format_usd(possibly)}"
    )
    assert h(f"no price for {UNPRICED}") in text
    # Drawn: a chart of cost per day and one of tokens by kind.
    assert text.count("<svg") == 2 and "cost per day (UTC) by model" in text

    by_day = re.findall(r"<h2>per day</h2>.*?<tbody>(.*?)</tbody>", text, re.S)
    assert len(re.findall("<tr>", by_day[0])) == 1  # every task finished today

    by_queue = web().get("/cost", params={"by": "queue", "days": "7"})
    assert by_queue.status_code == 200
    assert "cost per day (UTC) by queue" in by_queue.text


async def test_the_rollup_reads_each_finished_task_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, web: Callable[..., TestClient]
) -> None:
    await known_tasks(store)
    read: list[int] = []
    walked = cost_history.CostHistory._walked

    async def counting(self: cost_history.CostHistory, *args: object) -> None:
        await walked(self, *args)  # type: ignore[arg-type]
        read.append(self.tasks_read)

    monkeypatch.setattr(cost_history.CostHistory, "_walked", counting)
    client = web()
    first = client.get("/cost").text
    assert read == [3]
    again = client.get("/cost").text
    assert read == [3, 3]  # nothing new finished: nothing read again
    assert cells(again, "by model", PRICED) == cells(first, "by model", PRICED)

    await finished_task(store, "research-3", PRICED, [reply(5, 5)], queue="research")
    later = client.get("/cost").text
    assert read == [3, 3, 4]
    assert cells(later, "by model", PRICED)[1] == "4"  # replies: one more


async def test_the_first_page_says_it_is_computing_until_the_walk_is_done(
    store: Store, monkeypatch: pytest.MonkeyPatch, web: Callable[..., TestClient]
) -> None:
    await known_tasks(store)
    monkeypatch.setattr(cost_history, "WAIT_SECONDS", 0.0)
    client = web()
    first = client.get("/cost")
    assert first.status_code == 200
    assert h(COMPUTING) in first.text and 'data-refresh="' in first.text


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("days=0", "days must be a whole number from 1 to 30, not '0'"),
        ("days=31", "days must be a whole number from 1 to 30, not '31'"),
        ("days=-3", "days must be a whole number from 1 to 30, not '-3'"),
        ("days=week", "days must be a whole number from 1 to 30, not 'week'"),
        ("by=colour", "by must be one of model, queue, key, not 'colour'"),
    ],
)
def test_bad_input_to_the_cost_page_is_one_message(
    web: Callable[..., TestClient], query: str, said: str
) -> None:
    page = web().get(f"/cost?{query}")
    assert page.status_code == 400
    assert re.findall(r'<p class="notice bad">(.*?)</p>', page.text) == [h(said)]


async def test_the_task_list_totals_the_cost_of_the_tasks_it_lists(
    store: Store, postgres_url: str, web: Callable[..., TestClient]
) -> None:
    await known_tasks(store)
    page = web().get("/tasks", params={"queue": "research"})
    assert page.status_code == 200
    listed = await ledger_of_tasks(postgres_url, ["research-1", "research-2", "still-running"])
    [cost] = costs_of(listed, BUNDLED)
    total = re.search(r'<p class="list-cost" id="list-cost">(.*?)</p>', page.text, re.S)
    assert total is not None, page.text
    said = re.sub(r"<[^>]+>", "", total.group(1))
    assert said.startswith(h(f"cost of the 3 tasks listed: {format_usd(cost.billed)}"))
    assert h(f"possibly billed {format_usd(cost.possibly_billed)}") in said

    unpriced = web().get("/tasks", params={"queue": "mail"}).text
    mail = re.search(r'<p class="list-cost" id="list-cost">(.*?)</p>', unpriced, re.S)
    assert mail is not None and "cost of the 1 task listed: unknown" in mail.group(1)


async def test_both_stores_walk_the_finished_tasks_and_read_their_ledgers_whole(
    store: Store, tmp_path: Path
) -> None:
    """The page's two reads on PostgreSQL and sqlite: the finished tasks by finish past a
    mark, and their ledger events, long ones cut, giving the ledger of the whole log."""
    local = await open_store(f"sqlite:///{tmp_path / 'noeta.db'}", migrate=True)
    try:
        for each in (store, local):
            await known_tasks(each)
            views = each.capabilities.views
            assert views is not None
            start = datetime(2020, 1, 1, tzinfo=UTC)
            walked = await views.finished_tasks(start, "", 2, 0.0)
            rest = await views.finished_tasks(
                walked.tasks[-1].finished_at, walked.tasks[-1].task_id, 2, 0.0
            )
            found = walked.tasks + rest.tasks
            assert sorted(task.task_id for task in found) == ["mail-1", "research-1", "research-2"]
            [first] = [task for task in found if task.task_id == "research-1"]
            assert (first.queue, first.concurrency_key) == ("research", "tenant-a")
            ids = ["research-1", "research-2", "mail-1", "still-running"]
            read = await views.ledger_events(ids)
            for task_id in ids:
                log = [
                    LoggedEvent(e.seq, events.decode(e.type, e.data))
                    for e in await each.read_log(task_id)
                ]
                assert ledger_from(read[task_id]) == ledger_of(log), task_id
    finally:
        await local.close()
