"""The README's screenshots of `noeta web` (the workers page, the failures view and the
cost page), taken again: a sqlite store filled with a small fleet, some failures and two
weeks of model calls, `noeta web` on it, and each page rendered by headless Chromium
(`chromium --headless --screenshot`).

    .venv/bin/python tools/web_screenshots.py          # writes docs/img/web-*.png

Each page is fetched with the server's token as a bearer (Chromium's command line cannot
log in), its stylesheet put inline, and the saved HTML rendered: what a browser shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

REPOSITORY = Path(__file__).parents[1]
sys.path.insert(0, str(REPOSITORY))

from noeta.backends.stores import open_store  # noqa: E402
from noeta.core.ports.model import Text, Usage  # noqa: E402
from noeta.core.ports.store import Finish, NewEvent, NewTask, Store, TaskStatus  # noqa: E402
from noeta.core.ports.worker_registry import WorkerEntry  # noqa: E402
from noeta.core.rules import events  # noqa: E402

PAGES = {
    "web-workers.png": "/workers",
    "web-failures.png": "/failures",
    "web-cost.png": "/cost?days=14&by=queue",
}
WINDOW = "1280,760"
# Two weeks of agent tasks: (queue, concurrency key, model, tasks a day); the scripted
# model has no price, and every fifth research task lost a request's reply.
SPENDERS = [
    ("research", "acme", "anthropic:claude-sonnet-4-5", 9),
    ("research", "globex", "anthropic:claude-opus-4-5", 3),
    ("support", "acme", "anthropic:claude-haiku-4-5", 20),
    ("triage", None, "openai:gpt-5-mini", 30),
    ("triage", None, "scripted:triage.yaml", 4),
]
DAY_MICROS = 86_400_000_000
FAILURES = [  # (how many, job name or None for an agent task, queue, error)
    (14, "send_email", "mail", "send_email failed: SMTPServerDisconnected: Connection closed"),
    (6, "resize", "images", "resize failed: OSError: cannot identify image file"),
    (5, None, "default", "llm_error: the provider answered 529 (overloaded) 5 times"),
    (2, "send_email", "mail", "send_email failed: ValueError: not an address: 'bob@'"),
    (1, "resize", "images", "resize failed: MemoryError: "),
]


async def fill(url: str) -> None:
    """Three live workers (one holding tasks), one dead; and failures of five causes."""
    store = await open_store(url, migrate=True)
    try:
        registry = store.capabilities.workers
        assert registry is not None
        fleet = [
            ("web-1", ("default",), 4, 1_204, 9),
            ("mail-1", ("mail",), 8, 3_817, 16),
            ("images-1", ("images",), 2, 412, 7),
            ("images-2", ("images",), 2, 398, 0),
        ]
        for number, (name, queues, concurrency, processed, failed) in enumerate(fleet):
            entry = WorkerEntry(
                name,
                queues,
                None,
                host="box-1",
                pid=4101 + number * 37,
                version="0.31.0",
                concurrency=concurrency,
                instance=secrets.token_hex(4),
                processed=processed,
                failed=failed,
            )
            await registry.record_worker(entry, 0.2 if name == "images-2" else 600)
        n = 0
        for count, job, queue, error in FAILURES:
            for _ in range(count):
                n += 1
                await _failed(store, f"task-{n:03}", job, queue, error)
        prompt = events.TaskCreated(model="anthropic:claude-sonnet-4-5", prompt="summarise")
        for held in ("task-900", "task-901"):
            assert await store.create_task(NewTask(held, [NewEvent(*events.encode(prompt))]))
            assert await store.claim_task("web-1", held, 600) is not None
        await _spent(store)
    finally:
        await store.close()
    _backdated(url)


async def _spent(store: Store) -> None:
    for days_ago in range(14):
        for queue, key, model, per_day in SPENDERS:
            for n in range(per_day * (14 + days_ago % 5) // 16):
                task_id = f"cost-{queue}-{model.split(':')[1].replace('.', '')}-{days_ago}-{n}"
                created = [NewEvent(*events.encode(events.TaskCreated(model=model, prompt="go")))]
                task = NewTask(task_id, created, queue=queue, concurrency_key=key)
                assert await store.create_task(task)
                claim = await store.claim_task("web-1", task_id, 60)
                assert claim is not None
                size = 1 + (n * 7 + days_ago) % 5
                usage = Usage(4_000 * size, 600 * size, 12_000 * size, 2_000)
                happened: list[events.Event] = [
                    events.ModelCalled("0" * 64, input_estimate=18_000),
                    events.ModelReplied((Text("done"),), "end_turn", usage),
                ]
                if queue == "research" and n % 5 == 0:
                    happened += [
                        events.ModelCalled("1" * 64, input_estimate=30_000),
                        events.ModelCallCut(1, "worker_lost"),
                    ]
                happened.append(events.TaskFinished("done", "ok"))
                ended = [NewEvent(*events.encode(event)) for event in happened]
                await store.append(claim, 1, ended, next_state=Finish())


def _backdated(url: str) -> None:
    """Each cost task finished its days ago (a finished row's updated_at is its finish)."""
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as database:
        for (task_id,) in database.execute(
            "SELECT id FROM tasks WHERE id LIKE 'cost-%'"
        ).fetchall():
            days_ago = int(task_id.split("-")[-2])
            shift = days_ago * DAY_MICROS + 60_000_000
            database.execute(
                "UPDATE tasks SET updated_at = updated_at - ?, created_at = created_at - ?"
                " WHERE id = ?",
                (shift, shift, task_id),
            )
        database.commit()


async def _failed(store: Store, task_id: str, job: str | None, queue: str, error: str) -> None:
    if job is None:
        opening = [events.TaskCreated(model="anthropic:claude-sonnet-4-5", prompt="triage")]
    else:
        call = events.CallRequested("job", job, {"n": task_id})  # type: ignore[arg-type]
        opening = [events.TaskCreated(model="", tools=(job,)), call]
    encoded = [NewEvent(*events.encode(event)) for event in opening]
    assert await store.create_task(NewTask(task_id, encoded, queue=queue))
    claim = await store.claim_task("mail-1" if queue == "mail" else "web-1", task_id, 60)
    assert claim is not None
    ended = [NewEvent(*events.encode(events.TaskFinished("failed", error=error)))]
    await store.append(claim, len(encoded), ended, next_state=Finish(TaskStatus.FAILED))


def fetched(base: str, path: str, token: str) -> str:
    request = urllib.request.Request(
        base + path, headers={"Authorization": f"Bearer {token}", "Host": "127.0.0.1"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return str(reply.read().decode("utf-8"))


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium: `make chromium` installs it")
    work = Path(tempfile.mkdtemp(prefix="noeta-shots-"))
    url = f"sqlite:///{work / 'noeta.db'}"
    asyncio.run(fill(url))
    token = secrets.token_urlsafe(24)
    server = subprocess.Popen(
        [sys.executable, "-m", "noeta", "web", "--store", url, "--bind", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "NOETA_WEB_TOKEN": token, "NOETA_HOME": str(work / "home")},
    )
    try:
        assert server.stdout is not None
        serving = server.stdout.readline()
        base = serving.split("serving ", 1)[1].split()[0].rstrip("/")
        style = fetched(base, "/static/noeta.css", token)
        for name, path in PAGES.items():
            page = fetched(base, path, token)
            while "computing:" in page:  # the cost page's first walk: read it again
                page = fetched(base, path, token)
            page = page.replace(
                '<link rel="stylesheet" href="/static/noeta.css">', f"<style>{style}</style>"
            ).replace('<script src="/static/live.js" defer></script>', "")
            saved = work / f"{name}.html"
            saved.write_text(page)
            shot = REPOSITORY / "docs" / "img" / name
            shot.parent.mkdir(exist_ok=True)
            arguments = [chromium, "--headless=new", "--disable-gpu", "--hide-scrollbars"]
            if os.geteuid() == 0:
                arguments.append("--no-sandbox")  # Chromium refuses to run as root otherwise
            arguments += [f"--window-size={WINDOW}", f"--screenshot={shot}", saved.as_uri()]
            subprocess.run(arguments, check=True, capture_output=True, timeout=120)
            print(f"{shot.relative_to(REPOSITORY)}: {shot.stat().st_size:,} bytes")
    finally:
        server.terminate()
        server.wait(15)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
