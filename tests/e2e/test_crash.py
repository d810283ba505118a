"""Crashes: kill -9 of the embedded process and of a worker lose nothing."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Stack
from tests.waiting import eventually
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import tasks_pb2

pytestmark = pytest.mark.e2e
NS = "crash"


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    s.start_server()
    yield s
    s.close()


def succeeded(stack: Stack) -> int:
    count, token = 0, ""
    while True:
        req = tasks_pb2.ListTasksRequest(
            namespace=NS,
            queue="e2e",
            state=tasks_pb2.TASK_STATE_SUCCEEDED,
            page_size=1000,
            page_token=token,
        )
        page = stack.tasks.ListTasks(req, timeout=10)
        count += len(page.tasks)
        token = page.next_page_token
        if not token:
            return count


def test_kill9_of_the_embedded_process_loses_no_accepted_task(fresh: Stack) -> None:
    fresh.start_worker()
    start = time.time_ns() // 1_000_000
    dues = {f"k{i}": start + 500 + i * 15 for i in range(300)}  # due over ~5 s
    chunk = tasks_pb2.CreateTasksRequest(
        tasks=[
            tasks_pb2.CreateTaskRequest(
                namespace=NS, task_id=tid, queue="e2e", handler="record", run_at=to_timestamp(due)
            )
            for tid, due in dues.items()
        ]
    )
    resp = fresh.tasks.CreateTasks(iter([chunk]), timeout=30)
    assert resp.accepted == len(dues)
    eventually(lambda: len(fresh.executions()) >= 60, timeout=20)
    assert fresh.server is not None
    fresh.server.kill9()  # mid-run: some tasks fired, some in the queue, most still due
    for w in fresh.workers:
        w.kill9()
    fresh.workers.clear()
    fresh.start_server()  # same data directory, new port
    fresh.start_worker()
    eventually(lambda: succeeded(fresh) == len(dues), timeout=60)
    runs = Counter(e["task_id"] for e in fresh.executions() if e["namespace"] == NS)
    assert set(runs) == set(dues)
    early = [e for e in fresh.executions() if e["started_ms"] < dues[e["task_id"]]]
    assert early == []
    duplicates = sum(n - 1 for n in runs.values())
    print(f"duplicate deliveries around the crash: {duplicates} of {len(dues)}")


def test_kill9_of_a_worker_mid_task_redelivers_it(fresh: Stack) -> None:
    victim = fresh.start_worker()
    req = tasks_pb2.CreateTaskRequest(
        namespace=NS, task_id="slow", queue="e2e", handler="slow", payload=b"3"
    )
    fresh.tasks.CreateTask(req, timeout=10)
    eventually(lambda: [e for e in fresh.executions() if e["task_id"] == "slow"], timeout=20)
    victim.kill9()
    fresh.workers.remove(victim)
    # The lease of the dead worker runs out (visibility timeout 4 s in these tests) and a new
    # worker gets the same occurrence.
    fresh.start_worker()
    eventually(lambda: fresh.task(NS, "slow").state == tasks_pb2.TASK_STATE_SUCCEEDED, timeout=30)
    starts = [e for e in fresh.executions() if e["task_id"] == "slow" and e["event"] == "start"]
    assert len(starts) == 2 and starts[0]["key"] == starts[1]["key"]
    assert len(fresh.runs(NS, "slow")) == 1  # the killed run never reported


def test_worker_sigterm_finishes_in_flight_work(fresh: Stack) -> None:
    worker = fresh.start_worker()
    req = tasks_pb2.CreateTaskRequest(
        namespace=NS, task_id="drain", queue="e2e", handler="slow", payload=b"1.5"
    )
    fresh.tasks.CreateTask(req, timeout=10)
    eventually(lambda: [e for e in fresh.executions() if e["task_id"] == "drain"], timeout=20)
    assert worker.stop() == 0
    assert fresh.task(NS, "drain").state == tasks_pb2.TASK_STATE_SUCCEEDED
    assert [e["event"] for e in fresh.executions() if e["task_id"] == "drain"] == ["start", "end"]


def test_worker_burst_mode_exits_when_queue_is_empty(fresh: Stack) -> None:
    for i in range(5):
        req = tasks_pb2.CreateTaskRequest(
            namespace=NS, task_id=f"b{i}", queue="e2e", handler="record", delay=to_duration(0)
        )
        fresh.tasks.CreateTask(req, timeout=10)
    eventually(
        lambda: all(
            fresh.task(NS, f"b{i}").state == tasks_pb2.TASK_STATE_DISPATCHED for i in range(5)
        )
    )
    from tests.e2e.conftest import Process

    burst = Process(
        ["worker", "tests.e2e.worker_app:worker", "--server", fresh.address, "--burst"], fresh.env
    )
    assert burst.proc.wait(60) == 0
    assert "finished 5 runs" in burst.output()
