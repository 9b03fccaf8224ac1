"""The chunk merger: what h11 reads through it is what it reads without it (the same
responses, heads and body bytes, the same refusals), the bytes cut anywhere; and a chunked
body of many chunks reaches h11 as few."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import h11
import httpx
import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.models.chunk_merging import ChunkMerger, MergingBackend, merging_transport
from noeta.core.ports.model import ReplyDelta, Text, TextDelta
from noeta.testing.fake_providers import FakeAnthropic, Reply
from tests.backends.models.sample_requests import API_KEY, conversation

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = [b"event: ping\ndata: {}\n\n", b"data: " + "é😀".encode() * 40 + b"\n\n", b"x"]
CHUNKED = HEAD + b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS) + b"0\r\n\r\n"
CONNECTION = (
    b"HTTP/1.1 100 Continue\r\n\r\n"
    + CHUNKED
    + b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 5\r\nretry-after: 1\r\n\r\nslow!"
    + HEAD
    + b"3;name=value\r\nabc\r\n2\r\nde\r\n0\r\ntrailer: yes\r\n\r\n"
    + b"HTTP/1.1 204 No Content\r\n\r\n"
    + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    + HEAD
    + b"A\r\n0123456789\r\n1\r\n!\r\n0\r\n\r\n"
)


def h11_reads(pieces: list[bytes], responses: int = 6) -> list[object]:
    """What h11 makes of the bytes: each response's status, data (joined) and end, or
    the error it raised; and how many Data events it made."""
    connection = h11.Connection(h11.CLIENT)
    read: list[object] = []
    data_events = 0
    for _ in range(responses):
        connection.send(h11.Request(method="POST", target="/", headers=[("host", "x")]))
        connection.send(h11.EndOfMessage())
        body = b""
        try:
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    connection.receive_data(pieces.pop(0) if pieces else b"")
                elif isinstance(event, h11.InformationalResponse | h11.Response):
                    read.append((event.status_code, list(event.headers)))
                elif isinstance(event, h11.Data):
                    body += event.data
                    data_events += 1
                elif isinstance(event, h11.EndOfMessage):
                    read.append((body, list(event.headers)))
                    break
        except h11.RemoteProtocolError as error:
            read.append(("refused", str(error)))
            break
        connection.start_next_cycle()
    read.append(data_events)
    return read


def merged(pieces: list[bytes]) -> list[bytes]:
    merger = ChunkMerger()
    out = [merger.feed(piece) for piece in pieces]
    out.append(merger.end())
    return [piece for piece in out if piece]


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[start : start + size] for start in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 100_000])
def test_h11_reads_the_same_responses_through_the_merger(size: int) -> None:
    plain = h11_reads(cut(CONNECTION, size))
    through = h11_reads(merged(cut(CONNECTION, size)))
    assert through[:-1] == plain[:-1]
    assert plain[-2] == (b"0123456789!", [])  # every response read, none refused
    if size > len(CONNECTION):  # one read: each chunked body's chunks reach h11 as one
        assert (plain[-1], through[-1]) == (8, 4)


def test_a_read_of_many_chunks_reaches_h11_as_one() -> None:
    plain, through = h11_reads([CHUNKED], 1), h11_reads(merged([CHUNKED]), 1)
    assert through[:-1] == plain[:-1]
    assert (plain[-1], through[-1]) == (3, 1)


@pytest.mark.parametrize(
    "broken",
    [
        HEAD + b"5\r\nabc",  # cut inside a payload
        HEAD + b"3\r\nabc\r\n2",  # cut inside a size line
        HEAD + b"3\r\nabc\r",  # cut inside a payload's line end
        HEAD + b"3\r\nabcde\r\n0\r\n\r\n",  # a payload longer than its size
        HEAD + b"0x3\r\nabc\r\n0\r\n\r\n",  # a size that is not hex digits
        HEAD + b"-3\r\nabc\r\n0\r\n\r\n",
        HEAD + b"1_0\r\n0123456789abcdef\r\n0\r\n\r\n",
        b"HTTP/1.1 2OO OK\r\ncontent-length: 1\r\n\r\nx",  # a head h11 refuses
    ],
)
def test_what_h11_refuses_or_finds_cut_short_it_still_does(broken: bytes) -> None:
    for size in (1, 4, len(broken)):
        plain = h11_reads(cut(broken, size), 1)
        through = h11_reads(merged(cut(broken, size)), 1)
        assert through[0] == plain[0]
        assert through[-2][0] == plain[-2][0] == "refused"  # type: ignore[index]


def test_the_provider_transport_reads_through_the_merger_unless_a_proxy_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx has no parameter for it: if an httpx release renamed the pool, this fails."""
    transport = merging_transport("https://api.example.com/v1")
    assert isinstance(transport, httpx.AsyncHTTPTransport)
    assert isinstance(transport._pool._network_backend, MergingBackend)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert merging_transport("https://api.example.com/v1") is None
    monkeypatch.setenv("NO_PROXY", "api.example.com")
    assert merging_transport("https://api.example.com/v1") is not None


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context with a certificate for 127.0.0.1, which the client trusts."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subject = ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
    files = ["-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            *subject,
            *files,
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    return context


async def test_a_reply_streamed_over_tls_is_read_through_the_merger(
    tls: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merger reads the decrypted stream (start_tls), never the TCP one beneath."""
    fed: list[bytes] = []
    feed = ChunkMerger.feed

    def spied(merger: ChunkMerger, data: bytes) -> bytes:
        fed.append(data)
        return feed(merger, data)

    monkeypatch.setattr(ChunkMerger, "feed", spied)
    fake = FakeAnthropic()
    fake.tls = tls
    with fake:
        fake.script(Reply(text="word " * 300, piece_chars=3), Reply(text="again"))
        provider = AnthropicProvider(API_KEY, base_url=fake.base_url, timeout_seconds=30)
        told: list[ReplyDelta] = []
        try:
            first = await provider.send(provider.encode_request(conversation()), told.append)
            second = await provider.send(provider.encode_request(conversation()))
        finally:
            await provider.close()
    assert fake.base_url.startswith("https://")
    assert first.content == (Text("word " * 300),) and second.content == (Text("again"),)
    assert "".join(d.text for d in told if isinstance(d, TextDelta)) == "word " * 300
    assert fed and fed[0].startswith(b"HTTP/1.1 200")  # plain text: after the TLS layer
