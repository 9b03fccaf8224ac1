"""The README's screenshots of `noeta web` (the workers page and the failures view), taken
again: a sqlite store filled with a small fleet and some failures, `noeta web` on it, and
each page rendered by headless Chromium (`chromium --headless --screenshot`).

    .venv/bin/python tools/web_screenshots.py          # writes docs/img/web-*.png

Each page is fetched with the server's token as a bearer (Chromium's command line cannot
log in), its stylesheet put inline, and the saved HTML rendered: what a browser shows.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

REPOSITORY = Path(__file__).parents[1]
sys.path.insert(0, str(REPOSITORY))

from noeta.backends.stores import open_store  # noqa: E402
from noeta.core.ports.store import Finish, NewEvent, NewTask, Store, TaskStatus  # noqa: E402
from noeta.core.ports.worker_registry import WorkerEntry  # noqa: E402
from noeta.core.rules import events  # noqa: E402

PAGES = {"web-workers.png": "/workers", "web-failures.png": "/failures"}
WINDOW = "1280,760"
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
    finally:
        await store.close()


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
