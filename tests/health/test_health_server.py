"""The health server runs beside the event loop, not on it: /livez answers (and names the
event loop) while a synchronous call holds that loop, and a client that connects and
sends nothing holds only its own thread."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request

from noeta.health.process import ProcessHealth
from noeta.health.server import listen, parse_address


def livez(address: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://{address}/livez", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_livez_answers_and_names_the_event_loop_while_it_is_blocked() -> None:
    listening = listen(parse_address("127.0.0.1:0"))
    address = f"127.0.0.1:{listening.getsockname()[1]}"
    health = ProcessHealth(listening, None, stuck_after=0.1)
    blocked, release = threading.Event(), threading.Event()

    async def process() -> None:
        health.start()
        await asyncio.sleep(0)  # the event loop's beat turns once
        blocked.set()
        release.wait(60)  # a synchronous call holding the loop, as a frozen tool might
        await health.close()

    running = threading.Thread(target=asyncio.run, args=(process(),))
    running.start()
    try:
        assert blocked.wait(30)
        with socket.create_connection(listening.getsockname()[:2]):  # connects, sends nothing
            answers = [livez(address)]
            while answers[-1][0] != 503:  # the beat said 1 s; then the 0.1 s bound
                assert len(answers) < 2000, answers[-1]
                time.sleep(0.05)  # polling the endpoint for its state, not standing in for it
                answers.append(livez(address))
        assert answers[-1][1]["stuck"] == ["event loop"]
    finally:
        release.set()
        running.join(30)
