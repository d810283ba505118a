"""A worker heals by itself: it waits for a server that is not up yet, and rides out a
``kill -9`` of the server and its restart on the same port, without being restarted."""

from __future__ import annotations

import functools
import json
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.conftest import Process, Stack
from tests.waiting import eventually
from tests.worker_server import free_port
from tikk.timestamps import to_timestamp
from tikk.v1 import tasks_pb2

pytestmark = pytest.mark.e2e
NS = "heal"


class FixedPortStack(Stack):
    """``tikk dev`` on one port across restarts: a worker finds its server by address."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.address = f"127.0.0.1:{free_port()}"

    def start_server(self) -> str:
        self.server = Process(
            [
                *("dev", "--data-dir", str(self.data_dir), "--listen", self.address),
                *("--shards", "64", "--visibility-timeout", "4s"),
            ],
            self.env,
        )
        self.server.wait_for(re.compile("listening on"))
        if self._channel is not None:
            self._channel.close()  # a fresh channel, not one backing off from the dead server
        self._channel = grpc.insecure_channel(self.address)
        return self.address


@pytest.fixture
def fixed(tmp_path: Path) -> Iterator[FixedPortStack]:
    s = FixedPortStack(tmp_path)
    yield s
    s.close()


def create(stack: Stack, dues: dict[str, int]) -> None:
    chunk = tasks_pb2.CreateTasksRequest(
        tasks=[
            tasks_pb2.CreateTaskRequest(
                namespace=NS, task_id=tid, queue="e2e", handler="record", run_at=to_timestamp(due)
            )
            for tid, due in dues.items()
        ]
    )
    assert stack.tasks.CreateTasks(iter([chunk]), timeout=30).accepted == len(dues)


def spread(prefix: str, count: int, start_ms: int, every_ms: int) -> dict[str, int]:
    return {f"{prefix}{i}": start_ms + i * every_ms for i in range(count)}


def succeeded(stack: Stack) -> set[str]:
    done: set[str] = set()
    token = ""
    while True:
        req = tasks_pb2.ListTasksRequest(
            namespace=NS,
            queue="e2e",
            state=tasks_pb2.TASK_STATE_SUCCEEDED,
            page_size=1000,
            page_token=token,
        )
        page = stack.tasks.ListTasks(req, timeout=10)
        done |= {t.id for t in page.tasks}
        token = page.next_page_token
        if not token:
            return done


def failed_attempts(worker: Process) -> int:
    """How many times ``worker`` said its server did not answer."""
    return sum("did not answer" in line for line in list(worker.lines))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_worker_started_before_its_server_waits_for_it(fixed: FixedPortStack) -> None:
    patient, stopped = fixed.start_worker(), fixed.start_worker()
    for worker in (patient, stopped):  # both running, their stop signals handled
        worker.wait_for(re.compile("did not answer"), timeout=15)
    stopped.proc.send_signal(signal.SIGTERM)  # waiting for the server, yet it stops at once
    assert stopped.proc.wait(5) == 0, stopped.output()
    tried = failed_attempts(patient)
    eventually(lambda: failed_attempts(patient) >= tried + 2)  # a few more attempts fail
    assert patient.proc.poll() is None, patient.output()
    fixed.start_server()
    dues = spread("early", 20, now_ms() + 200, 10)
    create(fixed, dues)
    eventually(lambda: succeeded(fixed) == set(dues), timeout=30)
    assert patient.proc.poll() is None, patient.output()


def test_kill9_of_the_server_heals_without_restarting_the_worker(fixed: FixedPortStack) -> None:
    """The server dies three times while results stream in; each time it comes back on the
    same data and port within a few seconds, shorter than the report timeout."""
    fixed.start_server()
    worker = fixed.start_worker()
    dues: dict[str, int] = {}
    for crash in range(3):
        # All due at once, so that the worker streams results back to back when it dies.
        batch = spread(f"c{crash}-", 600, now_ms() + 500, 0)
        create(fixed, batch)
        dues |= batch
        eventually(functools.partial(started, fixed, batch, 150), timeout=30)
        assert fixed.server is not None
        fixed.server.kill9()  # mid-flow: results streaming, deliveries queued, some not sent
        killed_at = time.monotonic()
        time.sleep(0.5)  # the outage itself: the worker keeps trying meanwhile
        fixed.start_server()  # same data directory, same port
        print(f"crash {crash}: server back after {time.monotonic() - killed_at:.1f} s")
    after = spread("after", 100, now_ms() + 200, 10)
    create(fixed, after)
    dues |= after
    eventually(lambda: succeeded(fixed) == set(dues), timeout=60)
    assert worker.proc.poll() is None, worker.output()  # never restarted, never died
    assert len(fixed.workers) == 1
    runs = Counter(e["task_id"] for e in fixed.executions() if e["namespace"] == NS)
    assert set(runs) == set(dues)
    assert [e for e in fixed.executions() if e["started_ms"] < dues[e["task_id"]]] == []
    print(f"duplicate runs around the crashes: {sum(n - 1 for n in runs.values())} of {len(dues)}")


def started(stack: Stack, tasks: dict[str, int], at_least: int) -> bool:
    return len(tasks.keys() & ran(stack)) >= at_least


def ran(stack: Stack) -> set[str]:
    """Tasks that started, read while the worker appends (a last line may be incomplete)."""
    text = stack.log.read_text() if stack.log.exists() else ""
    lines = text.splitlines(keepends=True)
    starts = [json.loads(line) for line in lines if line.endswith("\n")]
    return {e["task_id"] for e in starts if e["namespace"] == NS}
