"""What `noeta web` lets a person do, and who: cancel, send, answer, each a POST whose
CSRF token is checked (stale or foreign: a 403 page that says so); the token every
request needs once NOETA_WEB_TOKEN is set; a foreign Host refused on loopback."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from starlette.testclient import TestClient

from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import CANCEL_KEY, Store, Wait
from noeta.core.rules import events
from noeta.web.security import CsrfTokens
from tests.web.conftest import TOKEN, task_with_log


def form_fields(page: str, action: str) -> dict[str, str]:
    """The hidden fields of the page's form that posts to `action`."""
    found = re.search(rf'<form method="post" action="{re.escape(action)}".*?</form>', page, re.S)
    assert found is not None, f"no form for {action}"
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', found.group(0)))


async def test_cancel_with_the_pages_token_asks_the_task_to_stop(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await task_with_log(store, "stoppable")
    http = web()
    fields = form_fields(http.get("/tasks/stoppable").text, "/tasks/stoppable/cancel")
    done = http.post("/tasks/stoppable/cancel", data=fields)
    assert done.status_code == 200
    assert "cancel requested" in done.text
    inbox = await store.read_inbox("stoppable")
    assert [entry.dedupe_key for entry in inbox] == [CANCEL_KEY]
    again = http.post("/tasks/stoppable/cancel", data=fields)
    assert "a cancel was requested already" in again.text


async def test_a_missing_foreign_or_stale_csrf_token_is_refused(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await task_with_log(store, "guarded", interactive=True)
    tokens = CsrfTokens(b"this process's secret")
    http = web(csrf=tokens)
    session = (http.cookies.get("noeta_web_session") or "").split(".")[0]
    other_process = CsrfTokens().issue(session, "/tasks/guarded/cancel")
    other_session = tokens.issue("another-session", "/tasks/guarded/cancel")
    stale = tokens.issue(session, "/tasks/guarded/cancel", now=time.time() - 3700)
    elsewhere = form_fields(http.get("/tasks/guarded").text, "/tasks/guarded/send")["csrf"]
    for token in [None, "", "garbage", other_process, other_session, elsewhere, stale]:
        refused = http.post("/tasks/guarded/cancel", data={} if token is None else {"csrf": token})
        assert refused.status_code == 403, token
        assert "Stale form" in refused.text and "reload the task" in refused.text
    assert await store.read_inbox("guarded") == []


async def test_a_message_is_sent_once_however_often_the_form_is_posted(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await task_with_log(store, "chatty", interactive=True)
    http = web()
    fields = form_fields(http.get("/tasks/chatty").text, "/tasks/chatty/send")
    first = http.post("/tasks/chatty/send", data={**fields, "text": "hello <b>there</b>"})
    assert "message sent" in first.text
    second = http.post("/tasks/chatty/send", data={**fields, "text": "hello <b>there</b>"})
    assert "sent already" in second.text
    assert [entry.payload for entry in await store.read_inbox("chatty")] == [
        {"text": "hello <b>there</b>"}
    ]
    blank = http.post("/tasks/chatty/send", data={**fields, "key": "k2", "text": "  "})
    assert blank.status_code == 400 and "needs some text" in blank.text


async def test_a_gate_is_answered_from_the_page(
    store: Store, web: Callable[..., TestClient]
) -> None:
    asked = [
        events.ModelCalled("cd" * 32),
        events.ModelReplied((ToolCall("c9", "Bash", {"command": "rm -rf build"}),), "tool_use"),
        events.ToolWaiting("c9", "Bash", {"command": "rm -rf build"}, "May this run?"),
    ]
    await task_with_log(store, "gated", asked, next_state=Wait(wake_on_prefix="answer:"))
    http = web()
    page = http.get("/tasks/gated").text
    assert "asks: May this run?" in page
    fields = form_fields(page, "/tasks/gated/answer")
    assert fields["call"] == "c9"
    done = http.post("/tasks/gated/answer", data={**fields, "decision": "deny", "note": "no"})
    assert done.status_code == 200 and "call c9 answered: deny" in done.text
    (entry,) = await store.read_inbox("gated")
    assert entry.payload == {"kind": "answer", "call_id": "c9", "decision": "deny", "note": "no"}
    wrong = http.post("/tasks/gated/answer", data={**fields, "call": "c1", "decision": "allow"})
    assert wrong.status_code == 409 and "not waiting for an answer on call c1" in wrong.text


async def test_with_a_token_every_request_needs_it(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await task_with_log(store, "secret-task")
    http = web(allowed_hosts=(), login=False)
    missing = http.get("/tasks")
    assert missing.status_code == 401 and "log in with the link" in missing.text
    wrong = http.get("/tasks", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert wrong.status_code == 401 and "bearer token is not this server" in wrong.text
    assert http.get("/static/noeta.css").status_code == 401
    bearer = http.get("/tasks", headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 200 and "secret-task" in bearer.text
    assert http.get("/login", params={"token": "nope"}).status_code == 401
    login = http.get("/login", params={"token": TOKEN})
    assert login.status_code == 303 and "httponly" in login.headers["set-cookie"].lower()
    assert http.get("/tasks").status_code == 200  # the cookie the login set
    assert TOKEN not in http.get("/tasks").text
    http.cookies.clear()
    by_form = http.post("/login", data={"token": TOKEN})
    assert by_form.status_code == 303 and http.get("/tasks").status_code == 200


async def test_on_loopback_a_foreign_host_is_refused(web: Callable[..., TestClient]) -> None:
    http = web(allowed_hosts=("127.0.0.1", "localhost"))
    assert http.get("/tasks", headers={"Host": "127.0.0.1:8787"}).status_code == 200
    rebound = http.get("/tasks", headers={"Host": "evil.example:8787"})
    assert rebound.status_code == 403 and "only to its own address" in rebound.text


async def test_a_step_is_forked_from_the_page(store: Store, web: Callable[..., TestClient]) -> None:
    replied = [
        events.ModelCalled("cd" * 32),
        events.ModelReplied((ToolCall("c1", "Read", {"file_path": "a"}),), "tool_use"),
        events.ToolStarted("c1", "Read", {"file_path": "a"}),
        events.ToolFinished("c1", "contents of a"),
    ]
    await task_with_log(store, "source", replied)
    http = web()
    page = http.get("/tasks/source").text
    fields = form_fields(page, "/tasks/source/fork")  # the first step's: the reply at seq 3
    assert fields["at"] == "3"
    done = http.post("/tasks/source/fork", data={**fields, "at": "5"})
    assert done.status_code == 200 and "forked at seq 5" in done.text
    new = re.search(r'href="/tasks/(\w+)"', done.text)
    assert new is not None
    forked = await store.read_log(new.group(1))
    assert [e.type for e in forked] == [
        "TaskCreated",
        "ModelCalled",
        "ModelReplied",
        "ToolStarted",
        "ToolFinished",
    ]
    cut = http.post("/tasks/source/fork", data={**fields, "at": "4"})
    assert cut.status_code == 400 and "cut tool call c1 (Read) in half" in cut.text
    bad = http.post("/tasks/source/fork", data={**fields, "at": "x"})
    assert bad.status_code == 400 and "a fork point is a seq" in bad.text


async def test_a_fork_from_the_page_may_copy_the_workspace(
    store: Store, web: Callable[..., TestClient]
) -> None:
    replied = [
        events.ModelCalled("cd" * 32),
        events.ModelReplied((ToolCall("c1", "Read", {"file_path": "a"}),), "tool_use"),
        events.ToolStarted("c1", "Read", {"file_path": "a"}),
        events.ToolFinished("c1", "contents of a"),
    ]
    await task_with_log(store, "source", replied)
    http = web()
    page = http.get("/tasks/source").text
    fields = form_fields(page, "/tasks/source/fork")
    assert '<input type="checkbox" name="workspace" value="copy">' in page  # unchecked: fresh
    done = http.post("/tasks/source/fork", data={**fields, "at": "5", "workspace": "copy"})
    new = re.search(r'href="/tasks/(\w+)"', done.text)
    assert done.status_code == 200 and new is not None
    created = (await store.read_log(new.group(1)))[0].data
    assert isinstance(created, dict) and created["workspace_from"] == "source"
    shown = http.get(f"/tasks/{new.group(1)}").text
    assert "workspace: a copy of task source, made when the fork first ran" in shown
