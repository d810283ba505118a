"""``/readyz`` of real processes, asked as a kubelet asks it (no token): ready on the embedded
default, not ready naming the backend that does not answer, and ``/healthz`` alive meanwhile.

The backends that are down are real and ours to close: a Kafka URL on a loopback port nobody
listens on (a server and a dispatcher start without their queue, and answer UNAVAILABLE for
what needs it), and the server a worker reports to, stopped under it."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Process
from tests.waiting import eventually

pytestmark = pytest.mark.e2e

_HTTP = re.compile(r"metrics (http://[\d.]+:\d+/)metrics")
_LISTENING = re.compile(r"listening on ([\d.]+:\d+)")
_ENV = {"PYTHONUNBUFFERED": "1"}


def probe(base: str, path: str = "readyz") -> tuple[int, object]:
    """(status, body: parsed JSON for /readyz, text for /healthz) of a GET without a token."""
    try:
        with urllib.request.urlopen(base + path, timeout=10) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        status, text = refused.code, refused.read().decode()
    return status, json.loads(text) if path == "readyz" else text


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for p in reversed(started):
        p.stop()


def start(processes: list[Process], *args: str) -> Process:
    p = Process(list(args), _ENV)
    processes.append(p)
    return p


def serving(data_dir: Path, *extra: str, http: str = "127.0.0.1:0") -> list[str]:
    """The options of a ``dev`` or ``server`` process on loopback ports of its own."""
    listen = ["--listen", "127.0.0.1:0", "--http", http]
    return ["--data-dir", str(data_dir), *listen, "--shards", "16", *extra]


def test_a_dev_server_on_the_embedded_default_is_ready(
    tmp_path: Path, processes: list[Process]
) -> None:
    dev = start(processes, "dev", *serving(tmp_path))
    base = dev.wait_for(_HTTP).group(1)
    assert probe(base) == (200, {"store": "ok", "history": "ok", "queue": "ok"})
    assert probe(base, "healthz") == (200, "ok\n")


def test_a_server_whose_queue_does_not_answer_is_alive_but_not_ready(
    tmp_path: Path, processes: list[Process]
) -> None:
    queue = f"kafka://127.0.0.1:{closed_port()}"
    server = start(processes, "server", *serving(tmp_path, "--queue", queue))
    base = server.wait_for(_HTTP).group(1)
    status, states = probe(base)
    assert status == 503
    assert isinstance(states, dict)
    assert (states["store"], states["history"]) == ("ok", "ok")
    assert states["queue"].startswith("unavailable: kafka: ping failed")
    assert probe(base, "healthz") == (200, "ok\n")


def test_a_dispatcher_is_ready_with_its_owner_and_not_without_its_queue(
    tmp_path: Path, processes: list[Process]
) -> None:
    metrics = ("--shards", "16", "--metrics", "127.0.0.1:0")
    ready = start(processes, "dispatcher", "--data-dir", str(tmp_path / "a"), *metrics)
    base = ready.wait_for(_HTTP).group(1)
    every = {"store": "ok", "history": "ok", "queue": "ok", "ownership": "ok"}
    eventually(lambda: probe(base) == (200, every), timeout=30)
    queue = f"kafka://127.0.0.1:{closed_port()}"
    unready = start(
        processes, "dispatcher", "--data-dir", str(tmp_path / "b"), "--queue", queue, *metrics
    )
    base = unready.wait_for(_HTTP).group(1)

    def queue_named() -> bool:
        status, states = probe(base)  # "process": "unavailable: starting" at first
        assert status == 503 and isinstance(states, dict)
        return states.get("ownership") == "ok" and (
            states.get("queue", "").startswith("unavailable: kafka")
        )

    eventually(queue_named, timeout=30)


def test_a_worker_is_ready_while_it_reports_to_a_server_and_not_once_the_server_is_gone(
    tmp_path: Path, processes: list[Process]
) -> None:
    dev = start(processes, "dev", *serving(tmp_path, http="off"))
    address = dev.wait_for(_LISTENING).group(1)
    app = "tests.e2e.worker_app:worker"
    worker = start(processes, "worker", app, "--server", address, "--metrics", "127.0.0.1:0")
    base = worker.wait_for(_HTTP).group(1)
    eventually(lambda: probe(base) == (200, {"server": "ok"}), timeout=30)
    assert dev.stop() == 0

    def unready() -> object:
        status, states = probe(base)
        return status == 503 and states

    states = eventually(unready, timeout=30)
    assert isinstance(states, dict) and states["server"].startswith("unavailable: no result")
    assert probe(base, "healthz") == (200, "ok\n")  # alive: only not to be sent work
