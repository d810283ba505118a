"""The Python client rides out a server restart: ``tikk dev`` is stopped (SIGTERM) and started
again on the same port and data directory while a read and a create with a task id are
under way; with retries they succeed (the task stored once), without them the same call
raises ``UnavailableError``."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.conftest import Process
from tests.e2e.test_client import free_port
from tikk.client import CallRetries, Client, TaskSpec, UnavailableError

pytestmark = pytest.mark.e2e

LATER = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(days=365)
# Waits of 0.2, 0.4, 0.8, then 1 s each, with no jitter: about 17 s in all, well past the
# restart (1.5 s down, then the start of a process) and gRPC's own reconnect backoff.
RIDE_OUT = CallRetries(attempts=20, initial_backoff_s=0.2, max_backoff_s=1.0, jitter="none")
DOWN_S = 1.5
LISTENING = re.compile(r"listening on [\d.]+:\d+")


class DevServer:
    """``tikk dev`` on a fixed port and data directory, to be stopped and started again."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.address = f"127.0.0.1:{free_port()}"
        self.processes: list[Process] = []

    def start(self) -> None:
        args = ["dev", "--data-dir", str(self.data_dir), "--listen", self.address,
                "--shards", "8", "--http", "off"]  # fmt: skip
        process = Process(args, {"PYTHONUNBUFFERED": "1"})
        self.processes.append(process)
        process.wait_for(LISTENING, timeout=60)

    def stop(self) -> None:
        assert self.processes[-1].stop() == 0, self.processes[-1].output()

    def restart_later(self, delay_s: float) -> threading.Thread:
        """Start again after ``delay_s``, in a thread (joined by the caller)."""

        def restart() -> None:
            time.sleep(delay_s)  # the time the server is down
            self.start()

        thread = threading.Thread(target=restart)
        thread.start()
        return thread

    def close(self) -> None:
        for process in self.processes:
            process.stop()


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevServer]:
    server = DevServer(tmp_path)
    server.start()
    yield server
    server.close()


def _later(task_id: str) -> TaskSpec:
    return TaskSpec("parked", "record", b"x", task_id=task_id, run_at=LATER)


@pytest.mark.timeout(180)
def test_a_read_and_a_create_with_an_id_ride_out_a_restart(dev: DevServer) -> None:
    with Client(dev.address, namespace="restart", timeout=60, retry=RIDE_OUT) as client:
        client.create_task(_later("before"))
        dev.stop()
        restarting = dev.restart_later(DOWN_S)
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=2) as pool:
            read = pool.submit(client.get_task, "before")
            created = pool.submit(client.create_task, _later("during"))
            before, during = read.result(timeout=90), created.result(timeout=90)
        waited = time.monotonic() - began
        restarting.join(90)
        assert (before.id, during.task.id) == ("before", "during")
        assert waited >= DOWN_S  # they waited for the new process, not the old one
        stored = [t.id for t in client.list_tasks("parked")]
    assert sorted(stored) == ["before", "during"]  # the create stored once


@pytest.mark.timeout(180)
def test_without_retries_the_same_calls_raise_unavailable(dev: DevServer) -> None:
    with Client(dev.address, namespace="restart", timeout=60, retry=None) as client:
        client.create_task(_later("before"))
        dev.stop()
        restarting = dev.restart_later(DOWN_S)
        began = time.monotonic()
        try:
            with pytest.raises(UnavailableError):
                client.get_task("before")
            with pytest.raises(UnavailableError):
                client.create_task(_later("during"))
            assert time.monotonic() - began < DOWN_S  # at once, while the server is down
        finally:
            restarting.join(90)
