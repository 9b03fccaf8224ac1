"""WebFetch against a local HTTP server on 127.0.0.1: no network is used.

Loopback is refused unless opened, so these fetchers open 127.0.0.1 (test_web_access.py
tests the refusals).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import WebFetch

PAGE = b"""<!doctype html><html><head><title>Hi</title>
<style>body { color: red }</style><script>alert("no")</script></head>
<body><h1>Welcome</h1><p>Fish &amp; chips<br>today</p><!-- hidden --></body></html>"""

LOCAL = ("127.0.0.1",)  # the fetch_allow entry that opens the test server

ROUTES: dict[str, tuple[int, str, bytes]] = {
    "/page.html": (200, "text/html; charset=utf-8", PAGE),
    "/missing": (404, "text/plain", b"no such page"),
    "/big.txt": (200, "text/plain", b"a" * 200_000),
    "/latin1.txt": (200, "text/plain; charset=iso-8859-1", "café".encode("latin-1")),
    "/meta.html": (200, "text/html", b'<meta charset="iso-8859-1"><p>na\xefve</p>'),
    "/image.png": (200, "image/png", b"\x89PNG\r\n\x1a\n\x00\x00"),
    "/data.json": (200, "application/json", b'{"ok": true}'),
}


class _Handler(BaseHTTPRequestHandler):
    release: threading.Event

    def do_GET(self) -> None:
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/page.html")
            self.end_headers()
            return
        if self.path == "/slow":
            self.release.wait(10)  # held until the test is done with it
            return
        status, content_type, body = ROUTES[self.path]
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    release = threading.Event()
    handler = type("Handler", (_Handler,), {"release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()
    server.server_close()
    thread.join()


async def test_html_is_reduced_to_text(base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}/page.html"}, ctx)
    assert not output.is_error
    assert output.content == (
        f"HTTP 200 OK · text/html · {base_url}/page.html\n\nHi\n\nWelcome\nFish & chips\ntoday"
    )


async def test_not_found_is_an_error_with_its_status(base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}/missing"}, ctx)
    assert output.is_error
    assert output.content == f"HTTP 404 Not Found · text/plain · {base_url}/missing\n\nno such page"


async def test_redirects_are_followed(base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}/redirect"}, ctx)
    assert output.content.startswith(f"HTTP 200 OK · text/html · {base_url}/page.html")


async def test_a_large_body_is_cut_at_the_byte_cap(base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(max_bytes=10_000, fetch_allow=LOCAL).run(
        {"url": f"{base_url}/big.txt"}, ctx
    )
    body = output.content.split("\n\n", 1)[1]
    assert body == "a" * 10_000 + "\n[download stopped at 10,000 bytes; the rest is unread]"


async def test_long_text_is_cut_at_the_character_cap(base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(output_cap_chars=1_000, fetch_allow=LOCAL).run(
        {"url": f"{base_url}/big.txt"}, ctx
    )
    assert output.content.endswith("a\n[text cut at 1,000 of 200,000 characters]")


@pytest.mark.parametrize(("path", "text"), [("/latin1.txt", "café"), ("/meta.html", "naïve")])
async def test_charset_is_honoured(path: str, text: str, base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(fetch_allow=LOCAL).run({"url": base_url + path}, ctx)
    assert output.content.endswith(f"\n\n{text}")


async def test_json_is_text(base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}/data.json"}, ctx)
    assert output.content.endswith('\n\n{"ok": true}')


async def test_binary_content_is_not_shown(base_url: str, ctx: ToolContext) -> None:
    output = await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}/image.png"}, ctx)
    assert output.is_error
    assert output.content.endswith("(not text: 10 bytes of image/png data, not shown)")


async def test_a_server_that_does_not_answer_times_out(base_url: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"did not answer within 0\.2 s"):
        await WebFetch(timeout_seconds=0.2, fetch_allow=LOCAL).run({"url": f"{base_url}/slow"}, ctx)


async def test_a_refused_connection_is_a_tool_error(ctx: ToolContext) -> None:
    # Port 1 on loopback: nothing listens there, and nothing leaves the machine.
    with pytest.raises(ToolError, match="cannot fetch"):
        await WebFetch(fetch_allow=LOCAL).run({"url": "http://127.0.0.1:1/"}, ctx)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "only http and https URLs can be fetched, not file"),
        ("ftp://127.0.0.1/x", "not ftp"),
        ("javascript:alert(1)", "not javascript"),
        ("127.0.0.1/page", "not no scheme"),
        ("http://", "names no host"),
    ],
)
async def test_only_http_urls_are_fetched(url: str, reason: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=reason):
        await WebFetch(fetch_allow=LOCAL).run({"url": url}, ctx)
