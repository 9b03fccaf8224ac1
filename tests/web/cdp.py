"""A headless Chromium driven over the Chrome DevTools Protocol, for the browser test.

CDP over a pipe (`--remote-debugging-pipe`: JSON messages ended by NUL on fds 3 and 4)
rather than a websocket: the same protocol, with no port to find and no websocket
client to add as a dependency. Waiting is done in the page (a promise that a
MutationObserver settles), never by sleeping."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import queue
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    given = os.environ.get("NOETA_CHROMIUM")
    if given:
        return given
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


class Chromium:
    """One headless browser with one page (a tab) attached."""

    def __init__(self, executable: str, profile: Path) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def on_fds_3_and_4() -> None:  # in the child, before exec
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)
            os.set_inheritable(3, True)  # dup2 onto itself would have kept close-on-exec
            os.set_inheritable(4, True)

        arguments = [
            executable,
            "--headless=new",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-extensions",
            "--disable-background-networking",
            "--window-size=1280,1500",
            "about:blank",
        ]
        if os.geteuid() == 0:
            arguments.insert(1, "--no-sandbox")  # Chromium refuses to run as root otherwise
        self.process = subprocess.Popen(
            arguments,
            preexec_fn=on_fds_3_and_4,  # noqa: PLW1509 (no threads of ours run yet)
            close_fds=False,  # closing happens after preexec_fn: it would close 3 and 4
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._ids = itertools.count(1)
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._events: queue.Queue[str] = queue.Queue()  # the methods of events, in order
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        attached = self.call("Target.attachToTarget", targetId=target, flatten=True)
        self._session = attached["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def call(self, method: str, *, session: bool = False, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        replies: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._replies[message_id] = replies
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        try:
            reply = replies.get(timeout=60)
        except queue.Empty:
            raise AssertionError(f"Chromium did not answer {method}") from None
        if "error" in reply:
            raise AssertionError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def _read(self) -> None:
        buffered = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buffered += chunk
            *messages, buffered = buffered.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                with self._lock:
                    waiting = self._replies.pop(message.get("id", -1), None)
                if waiting is not None:
                    waiting.put(message)
                elif "method" in message:
                    self._events.put(message["method"])

    def evaluate(self, expression: str, *, timeout_ms: int = 30_000) -> Any:
        """The value of `expression` in the page (a promise is awaited)."""
        result = self.call(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            timeout=timeout_ms,
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            said = details.get("exception", {}).get("description") or details.get("text")
            raise AssertionError(f"in the page: {said}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Navigate and wait until the new document has loaded."""
        self.call("Page.navigate", session=True, url=url)
        self.evaluate(
            "new Promise(r => { const ready = () => document.readyState === 'complete'"
            " && location.href !== 'about:blank'; if (ready()) r(); else "
            "window.addEventListener('load', () => r(), {once: true}); })"
        )

    def wait_for(self, selector: str, text: str = "", *, timeout_ms: int = 30_000) -> str:
        """The text of the first element matching `selector` (containing `text`), once
        there is one: a MutationObserver in the page reports it, no polling."""
        script = """
        new Promise((resolve, reject) => {
          const find = () => [...document.querySelectorAll(SELECTOR)]
              .find(e => e.textContent.includes(TEXT));
          const done = () => {
            const found = find();
            if (found) resolve(found.textContent);
            return Boolean(found);
          };
          if (done()) return;
          const seen = new MutationObserver(() => { if (done()) seen.disconnect(); });
          seen.observe(document,
                       {subtree: true, childList: true, characterData: true, attributes: true});
          setTimeout(() => reject(new Error("no " + SELECTOR + " with " + TEXT)), TIMEOUT);
        })"""
        script = script.replace("SELECTOR", json.dumps(selector)).replace("TEXT", json.dumps(text))
        value = self.evaluate(
            script.replace("TIMEOUT", str(timeout_ms)), timeout_ms=timeout_ms + 5000
        )
        return str(value)

    def click(self, selector: str, *, navigates: bool = False) -> None:
        """Click the element; with `navigates`, return once the page it opens has loaded."""
        while not self._events.empty():
            self._events.get_nowait()
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")
        while navigates:
            try:
                navigates = self._events.get(timeout=30) != "Page.loadEventFired"
            except queue.Empty:
                raise AssertionError(f"clicking {selector} loaded no page") from None

    def screenshot(self, path: Path) -> None:
        shot = self.call(
            "Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):
            self.call("Browser.close")
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        os.close(self._to_browser)
