"""Schedule-to-start timeouts, end to end through the dispatcher and the server's result
recorder on the real embedded store, queue and run history with a manual clock: an attempt
nobody starts in time is dead-lettered with the reason; one a worker started is left alone."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from history.sqlite import SqliteRunHistory
from server.ops.late_writes import LateWriteGuard
from server.ops.refusals import StartTooLate
from server.ops.results import ResultRecorder
from server.ops.start_timeouts import StartTimeouts
from tests.factories import T0, make_task
from tikk import delivery_codec
from tikk.clock import ManualClock
from tikk.delivery_tokens import DeliveryKeys, new_keys
from tikk.model import START_TIMEOUT, ResultKind, RunReport, RunStatus, Task, TaskState
from tikk.settings import DispatchSettings, Limits
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 2


@dataclass
class Rig:
    store: SqliteTaskStore
    history: SqliteRunHistory
    queue: LocalReadyQueue
    results: ResultRecorder
    keys: DeliveryKeys
    clock: ManualClock
    tmp: Path

    def dispatcher(self, epoch: int = 1) -> Dispatcher:
        expiry = StartTimeouts(self.store, self.history, self.queue)
        settings = DispatchSettings(cursor_flush_interval_ms=0)
        owner = SingleOwner(SHARDS, epoch)
        return Dispatcher(
            self.store, self.queue, owner, self.clock, settings=settings, expiry=expiry,
            keys=self.keys,
        )  # fmt: skip

    async def run(self, d: Dispatcher, until_ms: int) -> None:
        while self.clock.now_ms() < until_ms:
            self.clock.advance(100)
            await d.tick(self.clock.now_ms())

    async def consumer(self, queue: str) -> LocalQueueConsumer:
        consumer = LocalQueueConsumer(str(self.tmp / "queue.db"), [queue], 60_000)
        await consumer.start()
        return consumer


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    history = SqliteRunHistory(str(tmp_path / "history.db"))
    await store.start()
    await history.start()
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    clock, keys = ManualClock(T0), new_keys()
    results = ResultRecorder(
        store, history, queue, clock, guard=LateWriteGuard(store, clock, grace_ms=5_000),
        expiry=StartTimeouts(store, history, queue), keys=keys, limits=Limits(),
        rng=random.Random(1),
    )  # fmt: skip
    await queue.start()
    yield Rig(store, history, queue, results, keys, clock, tmp_path)
    await queue.close()
    await history.close()
    await store.close()


def timed(task_id: str, queue: str = "nobody", due_ms: int = T0 + 2_000) -> Task:
    task = make_task(task_id, due_ms=due_ms, queue=queue, shard_count=SHARDS)
    return task.evolve(start_timeout_ms=5_000)


async def test_an_attempt_nobody_starts_is_dead_lettered_with_the_reason(rig: Rig) -> None:
    await rig.store.create(timed("orphan"))
    await rig.run(rig.dispatcher(), T0 + 6_900)
    assert (await rig.store.get("default", "orphan")).state is TaskState.DISPATCHED
    await rig.run(rig.dispatcher(), T0 + 8_000)  # a new owner finds the deadline row
    task = await rig.store.get("default", "orphan")
    assert (task.state, task.last_error_type) == (TaskState.DEAD_LETTERED, START_TIMEOUT)
    assert "'nobody'" in task.last_error_message
    [run] = (await rig.history.list_for_task("default", "orphan", 10, "")).items
    assert (run.status, run.error_type) == (RunStatus.DEAD_LETTERED, START_TIMEOUT)
    dead = await rig.consumer("nobody.dlq")
    try:
        assert len(await dead.fetch(10)) == 1  # a copy on the dead-letter stream
    finally:
        await dead.close()


async def test_an_attempt_a_worker_started_in_time_is_left_to_run(rig: Rig) -> None:
    await rig.store.create(timed("busy", queue="q"))
    d = rig.dispatcher()
    await rig.run(d, T0 + 2_500)
    consumer = await rig.consumer("q")
    try:
        [message] = await consumer.fetch(10)
        delivery = delivery_codec.from_proto(message.delivery, SHARDS)
        assert delivery.entry.start_timeout_ms == 5_000
        report = RunReport("r1", delivery, ResultKind.STARTED, 0, 0, "w")
        await rig.results.record(report)  # the claim is won: no refusal
        await rig.run(d, T0 + 10_000)
        assert (await rig.store.get("default", "busy")).state is TaskState.DISPATCHED
        assert d.stats.expired == 0
    finally:
        await consumer.close()


async def test_a_worker_that_asks_too_late_runs_nothing(rig: Rig) -> None:
    await rig.store.create(timed("late", queue="q"))
    await rig.run(rig.dispatcher(), T0 + 2_500)
    consumer = await rig.consumer("q")
    try:
        [message] = await consumer.fetch(10)
        delivery = delivery_codec.from_proto(message.delivery, SHARDS)
        rig.clock.set(T0 + 7_500)  # the worker took 5.5 s to get to it; nothing ticked
        report = RunReport("r1", delivery, ResultKind.STARTED, 0, 0, "w")
        with pytest.raises(StartTooLate):
            await rig.results.record(report)
        task = await rig.store.get("default", "late")
        assert (task.state, task.last_error_type) == (TaskState.DEAD_LETTERED, START_TIMEOUT)
    finally:
        await consumer.close()


async def test_an_attempt_claimed_after_its_deadline_is_expired_not_published(rig: Rig) -> None:
    await rig.store.create(timed("stale", queue="q"))
    rig.clock.set(T0 + 60_000)  # every dispatcher was down past the deadline
    d = rig.dispatcher()
    await d.tick(rig.clock.now_ms())
    consumer = await rig.consumer("q")
    try:
        assert await consumer.fetch(10) == []
    finally:
        await consumer.close()
    assert (await rig.store.get("default", "stale")).state is TaskState.DEAD_LETTERED
    assert d.stats.expired == 1
