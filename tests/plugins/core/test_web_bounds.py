"""WebFetch's bounds hold against a hostile server: a compression bomb decodes to at most
the byte cap (measured in a child process's peak memory), stacked codings are refused,
and a server dripping bytes is cut at the whole fetch's time limit."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import WebFetch

LOCAL = ("127.0.0.1",)
BOMB_DECODED_BYTES = 256 * 2**20


def gzipped_zeros(size: int) -> bytes:
    """gzip of `size` zero bytes (about a thousandth of it), made without holding them."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(2**20)
    return b"".join([*(packer.compress(block) for _ in range(size // len(block))), packer.flush()])


BOMB = gzipped_zeros(BOMB_DECODED_BYTES)
DOUBLE_BOMB = gzip.compress(BOMB)

# path -> (Content-Encoding, body)
ENCODED: dict[str, tuple[str, bytes]] = {
    "/bomb": ("gzip", BOMB),
    "/double-bomb": ("gzip, gzip", DOUBLE_BOMB),
    "/double": ("gzip, gzip", gzip.compress(gzip.compress(b"hello twice"))),
    "/gzip": ("gzip", gzip.compress(b"hello gzip")),
    "/deflate": ("deflate", zlib.compress(b"hello deflate")),
    "/raw-deflate": ("deflate", zlib.compress(b"hello raw deflate", wbits=-15)[:]),
    "/brotli": ("br", b"\x0b\x02\x80hello\x03"),
}


class _Handler(BaseHTTPRequestHandler):
    stop: threading.Event

    def do_GET(self) -> None:
        if self.path == "/drip":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "100")
            self.end_headers()
            # One byte at a time, each well within a per-read timeout, never finishing
            # within the fetch's: until the test is done (or 100 bytes, 25 s, are sent).
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                if self.stop.wait(0.25):
                    return
            return
        coding, body = ENCODED[self.path]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Encoding", coding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    stop = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Handler,), {"stop": stop}))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    stop.set()
    server.shutdown()
    server.server_close()
    thread.join()


# Run in a child process, so that its peak memory (ru_maxrss) is the fetch's alone.
CHILD = """
import asyncio, json, resource, sys
from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import WebFetch
import httpx, httpcore  # imported before the baseline: their size is not the fetch's

async def main():
    fetch = WebFetch(fetch_allow=["127.0.0.1"], max_bytes=2**20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        ctx = ToolContext("t", "c", "/nonexistent")
        output = (await fetch.run({"url": sys.argv[1]}, ctx)).content
    except ToolError as error:
        output = f"ToolError: {error}"
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grew_kib": after - before, "output": output[-300:]}))

asyncio.run(main())
"""


@pytest.mark.parametrize("path", ["/bomb", "/double-bomb"])
def test_a_compression_bomb_stays_within_the_byte_cap_in_memory(base_url: str, path: str) -> None:
    assert len(ENCODED[path][1]) < BOMB_DECODED_BYTES // 500  # a small body ...
    child = subprocess.run(
        [sys.executable, "-c", CHILD, f"{base_url}{path}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(child.stdout)
    # ... that decodes to 256 MiB: the fetch holds at most about its 1 MiB cap of it.
    assert report["grew_kib"] < 32 * 1024, report
    assert "download stopped at 1,048,576 bytes" in report["output"] or (
        "stacked" in report["output"]
    ), report


async def test_stacked_codings_are_refused_readably(base_url: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"stacked content codings \('gzip, gzip'\)"):
        await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}/double"}, ctx)


@pytest.mark.parametrize(
    ("path", "text"),
    [("/gzip", "hello gzip"), ("/deflate", "hello deflate"), ("/raw-deflate", "hello raw")],
)
async def test_gzip_and_deflate_bodies_are_decoded(
    base_url: str, ctx: ToolContext, path: str, text: str
) -> None:
    output = await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}{path}"}, ctx)
    assert text in output.content


async def test_a_coding_it_did_not_ask_for_is_refused(base_url: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"content coding 'br'"):
        await WebFetch(fetch_allow=LOCAL).run({"url": f"{base_url}/brotli"}, ctx)


async def test_the_time_limit_covers_the_whole_fetch(base_url: str, ctx: ToolContext) -> None:
    fetch = WebFetch(fetch_allow=LOCAL, timeout_seconds=1.0)
    with pytest.raises(
        ToolError, match=r"did not answer within 1 s \(the time limit of the whole fetch\)"
    ):
        await fetch.run({"url": f"{base_url}/drip"}, ctx)
