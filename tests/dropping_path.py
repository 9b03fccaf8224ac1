"""A real network path to the test PostgreSQL whose packets a test drops silently, as a
firewall or a NAT that forgot a connection does (ADR-0129), and heals again.

Two network namespaces of the test's own, joined by a veth pair: the client's
(10.0.0.1), where a `noeta` process runs (`command`), and the server's (10.0.0.2), where a
`FaultProxy` in this process listens and relays to PostgreSQL on the host's loopback.
Each end of the veth sends through an HTB qdisc with a class whose queue is the kernel's
`blackhole`: what a filter steers there vanishes, and the sender's TCP counts it sent, so
a keepalive probe goes unanswered as it would at a firewall. `drop()` steers every packet
there (`heal()` stops that); `forget()` only those of the connections open now, as a
middlebox that forgot them does, while new connections pass. (netem's `loss 100%` would
do for `drop()`, where the kernel has netem; HTB, u32 and blackhole are common to kernels
with traffic control.) No address outside the two namespaces is touched, and both are
deleted on leaving, the veth pair with them, whatever the test did.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.testing.fault_proxy import FaultProxy

CLIENT_ADDRESS, SERVER_ADDRESS = "10.0.0.1", "10.0.0.2"
VETH = "veth0"  # one end in each namespace, so the name is free in both
CLONE_NEWNET = 0x40000000
PASS, DROP = "1:10", "1:20"  # the HTB classes: the default one, and the blackhole's
EVERY_PACKET, FORGOTTEN = "1", "2"  # the filters' priorities: `heal` deletes the first
UNLIMITED = "htb rate 10gbit quantum 60000"  # a class that never holds a test's packets back
_made = itertools.count()
T = TypeVar("T")


class DroppingPath:
    def __init__(self, postgres_url: str) -> None:
        made = f"noeta-drop-{os.getpid()}-{next(_made)}"
        self.client, self.server = f"{made}-client", f"{made}-server"
        self._postgres_url = postgres_url
        self.proxy: FaultProxy | None = None
        self._postgres: EmbeddedPostgres | None = None

    def url(self, **settings: str) -> str:
        """The test server's URL by way of this path (from the client's namespace)."""
        assert self.proxy is not None
        return make_conninfo(
            self._postgres_url, host=SERVER_ADDRESS, port=str(self.proxy.port), **settings
        )

    def command(self) -> list[str]:
        """The prefix that runs a command in the client's namespace (the same process:
        `ip netns exec` execs it, so its pid and signals are the command's own)."""
        return ["ip", "netns", "exec", self.client]

    def drop(self) -> None:
        """Every packet, both ways, from now until `heal()`."""
        for namespace in (self.client, self.server):
            self._steer(namespace, EVERY_PACKET, "u32 0 0")

    def heal(self) -> None:
        for namespace in (self.client, self.server):
            _run(f"tc -n {namespace} filter del dev {VETH} parent 1: prio {EVERY_PACKET}")

    def forget(self) -> set[int]:
        """Drop, for good, every packet of the connections established now (their client
        ports, returned); a connection opened later passes."""
        ports = self.established()
        for port in ports:
            self._steer(self.client, FORGOTTEN, f"ip sport {port} 0xffff")
            self._steer(self.server, FORGOTTEN, f"ip dport {port} 0xffff")
        return ports

    def established(self) -> set[int]:
        """The client ports of the client namespace's established TCP connections: the
        kernel's table (state 01), which a socket reset by keepalive leaves at once."""
        table = _run(f"ip netns exec {self.client} cat /proc/net/tcp").splitlines()[1:]
        rows = [line.split() for line in table]
        return {int(row[1].rpartition(":")[2], 16) for row in rows if row[3] == "01"}

    def open(self) -> None:
        for namespace in (self.client, self.server):
            _run(f"ip netns add {namespace}")
        _run(
            f"ip link add {VETH} netns {self.client} type veth peer name {VETH} netns {self.server}"
        )
        for namespace, address in ((self.client, CLIENT_ADDRESS), (self.server, SERVER_ADDRESS)):
            _run(f"ip -n {namespace} address add {address}/30 dev {VETH}")
            _run(f"ip -n {namespace} link set {VETH} up")
            _run(f"ip -n {namespace} link set lo up")
            tc = f"tc -n {namespace}"
            _run(f"{tc} qdisc add dev {VETH} root handle 1: htb default {PASS[2:]}")
            for each in (PASS, DROP):
                _run(f"{tc} class add dev {VETH} parent 1: classid {each} {UNLIMITED}")
            _run(f"{tc} qdisc add dev {VETH} parent {DROP} blackhole")
        parts = conninfo_to_dict(self._postgres_url)
        listening = _listening_socket_in(self.server, SERVER_ADDRESS)
        self.proxy = FaultProxy(str(parts["host"]), int(parts["port"]), listening=listening)
        self.proxy.start()

    def start_postgres(self) -> str:
        """A PostgreSQL of the path's own, started in the server's namespace and listening
        on its address there, so that its sockets are the ones the path forgets (a test of
        what the server does then); its URL, from the client's namespace. The session's
        PostgreSQL is reached through the proxy, whose sockets do not face the path."""
        settings = {"listen_addresses": f"127.0.0.1,{SERVER_ADDRESS}", "fsync": "off"}
        self._postgres = EmbeddedPostgres(make_home("noeta-drop-pg-"), settings=settings)
        local = in_namespace(self.server, self._postgres.start)
        with (self._postgres.pgdata / "pg_hba.conf").open("a") as rules:
            rules.write(f"host all all {CLIENT_ADDRESS}/32 scram-sha-256\n")
        with self.connect_inside(local) as admin:
            admin.execute("SELECT pg_reload_conf()")
        return make_conninfo(local, host=SERVER_ADDRESS)

    def connect_inside(self, url: str) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection to `url` made in the server's namespace, on its loopback: it never
        crosses the path (an observer of the path's PostgreSQL)."""
        local = make_conninfo(url, host="127.0.0.1")
        return in_namespace(self.server, lambda: psycopg.connect(local, autocommit=True))

    def close(self) -> None:
        if self._postgres is not None:
            self._postgres.stop(mode="immediate")
            shutil.rmtree(self._postgres.root, ignore_errors=True)
        if self.proxy is not None:
            self.proxy.stop()
        for namespace in (self.client, self.server):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)

    def _steer(self, namespace: str, priority: str, match: str) -> None:
        _run(
            f"tc -n {namespace} filter add dev {VETH} parent 1: prio {priority}"
            f" protocol ip u32 match {match} flowid {DROP}"
        )


@contextlib.contextmanager
def dropping_path(postgres_url: str) -> Iterator[DroppingPath]:
    """A `DroppingPath`, or the test skipped with the reason it cannot be built here
    (failed under CI when only iproute2 is missing: `make install` brings it)."""
    if os.geteuid() != 0:
        pytest.skip("dropping packets needs root (network namespaces and tc)")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        why = "no ip and tc on this machine (iproute2: `make iproute2` installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    path = DroppingPath(postgres_url)
    try:
        try:
            path.open()
        except subprocess.CalledProcessError as failed:
            pytest.skip(f"cannot build a dropping network path here: {failed.stderr.strip()}")
        yield path
    finally:
        path.close()


def _run(command: str) -> str:
    """An iproute2 command (its words never hold a space), its output."""
    done = subprocess.run(command.split(), capture_output=True, text=True, check=True)
    return done.stdout


def _listening_socket_in(namespace: str, address: str) -> socket.socket:
    """A listening TCP socket made inside `namespace`; it stays there."""
    return in_namespace(namespace, lambda: socket.create_server((address, 0)))


def in_namespace(namespace: str, call: Callable[[], T]) -> T:
    """`call`'s result, called inside `namespace`: a thread enters it (a network namespace
    is per thread), calls, and ends. What it made stays there: a socket, and the processes
    it started (a child is born in its parent thread's namespace)."""
    made: list[T] = []
    failed: list[BaseException] = []

    def make() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        descriptor = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
        try:
            if libc.setns(descriptor, CLONE_NEWNET) != 0:
                number = ctypes.get_errno()
                failed.append(OSError(number, f"setns: {os.strerror(number)}"))
                return
        finally:
            os.close(descriptor)
        try:
            made.append(call())
        except BaseException as error:  # raised again in the caller's thread
            failed.append(error)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]
