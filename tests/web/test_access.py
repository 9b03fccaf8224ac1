"""Who reaches `noeta web` and how (ADR-0071): a token on every bind, loopback too, traded
at /login for a session cookie that the forms' CSRF tokens are bound to; the Host header
parsed as an authority; odd input refused in words (400), never a 500."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import CANCEL_KEY, Store, Wait
from noeta.core.rules import events
from tests.cli.test_nondumpable import shared_dir, unprivileged_prefix
from tests.web.conftest import TOKEN, task_with_log
from tests.web.test_actions import form_fields

__all__ = ["shared_dir"]  # the fixture, shared with the worker's /proc test


@pytest.fixture
def tokenless_server(postgres_url: str) -> Iterator[tuple[str, str]]:
    """`noeta web` on loopback as a newcomer starts it (no NOETA_WEB_TOKEN): its address
    and the login link it prints."""
    env = {key: value for key, value in os.environ.items() if key != "NOETA_WEB_TOKEN"}
    process = subprocess.Popen(
        [sys.executable, "-m", "noeta", "web", "--bind", "127.0.0.1:0", "--store", postgres_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        serving = process.stdout.readline()
        assert "serving http://" in serving, process.stderr.read() if process.stderr else serving
        base = serving.split("serving ", 1)[1].split()[0].rstrip("/")
        login = process.stdout.readline()
        yield base, login
    finally:
        process.terminate()
        process.wait(10)


async def test_on_loopback_without_a_token_every_page_and_action_needs_the_login(
    store: Store, tokenless_server: tuple[str, str]
) -> None:
    base, login_line = tokenless_server
    await task_with_log(store, "private")
    link = re.search(r"open (http://\S+/login\?token=\S+)", login_line)
    assert link is not None, login_line
    async with httpx.AsyncClient(base_url=base, timeout=30, follow_redirects=False) as http:
        for method, path in [
            ("GET", "/tasks"),
            ("GET", "/tasks/private"),
            ("GET", "/tasks/private/live"),
            ("POST", "/tasks/private/cancel"),
            ("POST", "/tasks/private/send"),
            ("POST", "/tasks/private/answer"),
        ]:
            refused = await http.request(method, path, data={"csrf": "1.x", "text": "hi"})
            assert refused.status_code == 401, (method, path)
            assert "private" not in refused.text and 'action="/login"' in refused.text
        wrong = await http.get("/login", params={"token": "not-the-one-printed"})
        assert wrong.status_code == 401
        logged_in = await http.get(link.group(1))
        assert logged_in.status_code == 303
        cookie = logged_in.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "secure" not in cookie
        assert link.group(1).split("token=", 1)[1].lower() not in cookie  # a session, not it
        assert "private" in (await http.get("/tasks")).text
    assert await store.read_inbox("private") == []


async def test_a_session_from_another_token_is_refused(web: Callable[..., TestClient]) -> None:
    other = web(token="another-token-of-some-length")
    mine = web(login=False)
    foreign = other.cookies.get("noeta_web_session")
    assert foreign
    mine.cookies.set("noeta_web_session", foreign)
    refused = mine.get("/tasks")
    assert refused.status_code == 401
    assert mine.get("/tasks", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_off_loopback_the_session_cookie_is_secure(web: Callable[..., TestClient]) -> None:
    http = web(login=False, secure_cookie=True)
    login = http.get("/login", params={"token": TOKEN})
    assert login.status_code == 303 and "secure" in login.headers["set-cookie"].lower()


@pytest.mark.parametrize(
    "host", ["127.0.0.1:80@evil.com", "localhost:8787.evil.com", "evil.com", "127.0.0.1:x"]
)
def test_a_host_that_only_starts_like_loopback_is_refused(
    host: str, web: Callable[..., TestClient]
) -> None:
    http = web(allowed_hosts=("127.0.0.1", "localhost"), login=False)
    assert http.get("/login", params={"token": TOKEN}, headers={"Host": host}).status_code == 403
    assert http.get("/tasks", headers={"Host": host}).status_code == 403
    ok = http.get("/login", params={"token": TOKEN}, headers={"Host": "localhost:8787"})
    assert ok.status_code == 303


async def test_odd_input_is_a_400_not_a_500(store: Store, web: Callable[..., TestClient]) -> None:
    await task_with_log(store, "odd")
    http = web()
    for path, params in [
        ("/tasks/odd", {"after": "²"}),
        ("/tasks/odd/live", {"after": "²"}),
        ("/tasks/odd/events/²", {}),
        ("/tasks/odd/events/1", {"part": "²"}),
    ]:
        assert http.get(path, params=params).status_code == 400, (path, params)
    for csrf in ["²³.abc", "1700000000.é", "é"]:
        posted = http.post("/tasks/odd/cancel", data={"csrf": csrf})
        assert posted.status_code == 400, csrf
    assert await store.read_inbox("odd") == []


async def test_a_task_whose_id_has_a_colon_is_cancelled_messaged_and_answered(
    store: Store, web: Callable[..., TestClient]
) -> None:
    task_id = "ns:job.1_a-b"
    asked: list[events.Event] = [
        events.ModelCalled("cd" * 32),
        events.ModelReplied((ToolCall("c9", "Bash", {"command": "ls"}),), "tool_use"),
        events.ToolWaiting("c9", "Bash", {"command": "ls"}, "May this run?"),
    ]
    await task_with_log(
        store, task_id, asked, interactive=True, next_state=Wait(wake_on_prefix="answer:")
    )
    http = web()
    page = http.get(f"/tasks/{task_id}").text
    base = "/tasks/ns%3Ajob.1_a-b"
    sent = http.post(f"{base}/send", data={**form_fields(page, f"{base}/send"), "text": "hi"})
    assert sent.status_code == 200, sent.text
    fields = form_fields(page, f"{base}/answer")
    answered = http.post(f"{base}/answer", data={**fields, "decision": "allow"})
    assert answered.status_code == 200, answered.text
    cancelled = http.post(f"{base}/cancel", data=form_fields(page, f"{base}/cancel"))
    assert cancelled.status_code == 200, cancelled.text
    keys = [entry.dedupe_key for entry in await store.read_inbox(task_id)]
    assert len(keys) == 3 and CANCEL_KEY in keys


def test_a_same_user_process_cannot_read_the_token_from_proc(shared_dir: Path) -> None:
    prefix = unprivileged_prefix()  # root reads every /proc file: run as nobody
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(shared_dir),
        "NOETA_HOME": str(shared_dir / "home"),
        "NOETA_WEB_TOKEN": TOKEN,
    }
    store = f"sqlite:///{shared_dir / 'noeta.db'}"
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "noeta", "web", "--bind", "127.0.0.1:0", "--store", store],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        serving = process.stdout.readline()
        assert "serving http://" in serving, process.stderr.read() if process.stderr else ""
        read = subprocess.run(
            [*prefix, "cat", f"/proc/{process.pid}/environ"],
            capture_output=True, env=environment, timeout=60, check=False,
        )  # fmt: skip
        assert read.returncode != 0 and b"Permission denied" in read.stderr
        assert TOKEN.encode() not in read.stdout
    finally:
        process.terminate()
        process.wait(10)
