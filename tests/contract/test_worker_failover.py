"""Workers on the real Kafka hand their partitions over when they fail: a worker killed with
``kill -9`` (its partitions move once its group session runs out), and a worker that cannot
report its results (it leaves the groups, and joins again once its server is back).

The server side is a real ``WorkerService`` on a loopback port (``tests.worker_server``); the
queue is the real Kafka of ``python -m devtools stack up``, under a topic prefix of each test's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.contract.conftest import QueuePair
from tests.contract.test_ready_queue import delivery, fetch_until
from tests.e2e.conftest import Process, read_executions
from tests.factories import make_task
from tests.services import KAFKA, require
from tests.waiting import eventually_async
from tests.worker_server import WorkerServer
from tikk.model import Delivery
from worker_sdk import TaskContext, Worker

SESSION_S = 6  # the --session-timeout under test (the default, and the brokers' minimum)
BOUND_S = 20.0  # generous: a dead member's partitions move within about session + 2 s


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def pair() -> AsyncIterator[QueuePair]:
    """The producer side under a fresh topic prefix (topics deleted afterwards)."""
    p = QueuePair.kafka(require("kafka", KAFKA), 4)
    try:
        await p.start()
        yield p
    finally:
        await p.close()


async def publish(pair: QueuePair, prefix: str, count: int, queue: str) -> dict[str, int]:
    """``count`` deliveries due now, spread over the partitions by their keys; id -> due ms."""
    due = now_ms()
    tasks = [
        make_task(f"{prefix}{i}", queue=queue, handler="record", due_ms=due) for i in range(count)
    ]
    await pair.producer.publish([Delivery(t.entry(), due) for t in tasks])
    return {t.task_id: due for t in tasks}


# A worker process killed with -9: its partitions go to the other member of the group.


def starts(log: Path) -> list[dict[str, Any]]:
    """The handler starts logged so far by ``tests.e2e.worker_app``."""
    return read_executions(log)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for p in started:
        p.stop(10)


async def test_a_killed_workers_partitions_move_within_the_session(
    pair: QueuePair, processes: list[Process], tmp_path: Path
) -> None:
    server = WorkerServer(queue_url=pair.url)
    await server.start()
    log = tmp_path / "executions.jsonl"
    env = {"TIKK_E2E_LOG": str(log), "PYTHONUNBUFFERED": "1"}
    args = ["worker", "tests.e2e.worker_app:worker", "--server", server.address]
    args += ["--session-timeout", f"{SESSION_S}s", "--heartbeat-interval", "1s"]
    try:
        processes += [Process(args, env), Process(args, env)]
        victim, survivor = await _both_consuming(pair, processes, log, server)
        victim.kill9()  # no LeaveGroup: the broker notices only when the session runs out
        dues = await publish(pair, "after-", 24, "e2e")  # some on each member's partitions
        await eventually_async(lambda: dues.keys() <= {s["task_id"] for s in starts(log)}, BOUND_S)
        await eventually_async(functools.partial(recorded, server, dues), 10)
        first: dict[str, int] = {}
        for s in starts(log):
            if s["task_id"] in dues:
                first.setdefault(str(s["task_id"]), int(str(s["started_ms"])))
        delays = sorted((first[t] - dues[t]) / 1000 for t in dues)
        print(f"due -> handler start after the kill: min {delays[0]:.1f} s, max {delays[-1]:.1f} s")
        # Those on the dead member's partitions waited for its session to run out; all ran.
        assert 2.0 < delays[-1] <= BOUND_S
        assert {s["worker"] for s in starts(log) if s["task_id"] in dues} == {survivor}
    finally:
        await server.stop()


async def _both_consuming(
    pair: QueuePair, processes: list[Process], log: Path, server: WorkerServer
) -> tuple[Process, str]:
    """Publish until both worker processes have run something (they split the partitions)
    and all of it is recorded; returns the one to kill and the other's worker id."""
    deadline = time.monotonic() + 40
    for round_ in itertools.count():
        dues = await publish(pair, f"warm{round_}-", 16, "e2e")
        await eventually_async(functools.partial(recorded, server, dues), 15)
        seen = {str(s["worker"]) for s in starts(log)}
        if len(seen) == 2 or time.monotonic() > deadline:
            break
    assert len(seen) == 2, [p.output() for p in processes]
    survivor = next(w for w in seen if w.endswith(f"-{processes[1].proc.pid}"))
    return processes[0], survivor


def recorded(server: WorkerServer, tasks: dict[str, int] | set[str]) -> bool:
    """Whether ``server`` acknowledged a run of each of ``tasks``."""
    return set(tasks) <= server.acked_tasks


# A worker that cannot report: it leaves the groups, and comes back with its server.


@dataclass
class Runs:
    """Which in-process worker ran which task."""

    by: list[tuple[str, str]] = field(default_factory=list)

    def worker(self, name: str) -> Worker:
        worker = Worker(queues=["heal"], concurrency=8, worker_id=name, report_timeout_s=2.0)

        @worker.handler("record")
        async def record(ctx: TaskContext, payload: bytes) -> None:
            self.by.append((name, ctx.task_id))

        return worker

    def ran(self, name: str) -> set[str]:
        return {task for who, task in self.by if who == name}

    def each_ran(self, names: set[str], tasks: Iterable[str]) -> bool:
        """Whether each of ``names`` ran one of ``tasks`` at least."""
        return all(self.ran(name) & set(tasks) for name in names)


async def test_a_worker_that_cannot_report_steps_aside_and_comes_back(
    pair: QueuePair, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tikk.worker")
    gone, healthy = WorkerServer(pair.url), WorkerServer(pair.url)
    await gone.start()
    await healthy.start()
    runs, stop = Runs(), asyncio.Event()
    workers = [
        asyncio.create_task(runs.worker("w1").run(gone.address, stop=stop)),
        asyncio.create_task(runs.worker("w2").run(healthy.address, stop=stop)),
    ]
    try:
        await _until_ran(pair, runs, "warm", {"w1", "w2"})
        await gone.stop()
        stopped = time.monotonic()
        batch = await publish(pair, "gone-", 24, "heal")
        # w1 runs what its partitions hold, cannot report, and after the report timeout leaves
        # the group: w2 gets every partition, with what w1 never committed.
        await eventually_async(functools.partial(recorded, healthy, batch), BOUND_S)
        print(f"all recorded by the other worker {time.monotonic() - stopped:.1f} s after")
        assert "pausing" in caplog.text
        stranded = runs.ran("w1") & batch.keys()
        assert stranded, "w1 held partitions, so it ran part of the batch"
        assert stranded <= runs.ran("w2")  # delivered again to the healthy worker
        await gone.start()  # same port: w1 reports what it ran, and consumes again
        await eventually_async(functools.partial(recorded, gone, stranded), 10)
        await eventually_async(lambda: "resuming" in caplog.text, 10)
        await _until_ran(pair, runs, "back", {"w1"})
        print(f"w1 consuming again {time.monotonic() - stopped:.1f} s after its server went")
    finally:
        stop.set()
        try:
            async with asyncio.timeout(30):
                await asyncio.gather(*workers)
        finally:
            # Whatever the workers did: a server left running outlives this test's event
            # loop and fails whichever test the garbage collector meets it in.
            await gone.stop()
            await healthy.stop()


async def _until_ran(pair: QueuePair, runs: Runs, prefix: str, workers: set[str]) -> None:
    """Publish rounds to queue ``heal`` until each of ``workers`` ran one of them. A round
    may all go to the others (a worker not yet assigned partitions): after a second without
    success, the next round is published."""
    deadline = time.monotonic() + 40
    for round_ in itertools.count():
        batch = await publish(pair, f"{prefix}{round_}-", 16, "heal")
        each_ran = functools.partial(runs.each_ran, workers, batch.keys())
        with contextlib.suppress(AssertionError):
            await eventually_async(each_ran, 1.0)
        if each_ran() or time.monotonic() > deadline:
            break
    assert each_ran(), runs.by[-40:]


# What a worker that steps aside relies on, on every backend.


async def test_a_commit_after_close_does_nothing_and_the_message_comes_again(
    queue_pair: QueuePair,
) -> None:
    first = await queue_pair.consumer(["q"], visibility_ms=1000)
    await queue_pair.settle(first)
    await queue_pair.producer.publish([delivery("a")])
    (message,) = await fetch_until(first, 1)
    await first.close()
    await first.commit(message)  # a run that finished after its worker stepped aside
    await first.extend([message])
    await first.close()  # closing twice is harmless too
    second = await queue_pair.consumer(["q"], visibility_ms=1000)
    again = await fetch_until(second, 1, timeout_s=BOUND_S)
    assert [(m.delivery.task_id, m.delivery_count) for m in again] == [("a", 2)]
