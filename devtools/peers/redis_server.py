"""A ``redis-server`` of a run's own: a free loopback port, the run's scratch folder, no
persistence; a member of the run's fleet, so it is sampled and stopped with the system."""

from __future__ import annotations

import socket
import time

from devtools.peers.processes import PeerFleet

START_TIMEOUT_S = 20.0
# The URL of the run's redis-server, for the processes of the system under test.
REDIS_URL_ENV = "TIKK_PEERS_REDIS_URL"


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_redis(fleet: PeerFleet) -> str:
    """Start ``redis-server`` in ``fleet``; its URL once it answers PING."""
    port = free_port()
    folder = fleet.work / "redis"
    folder.mkdir(exist_ok=True)
    argv = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
        "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
    ]  # fmt: skip
    fleet.launch("redis-server", "redis", argv)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers_ping(port):
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"redis-server on port {port}: no answer in {START_TIMEOUT_S:g} s")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0"


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False
