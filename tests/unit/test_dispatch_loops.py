"""The dispatcher's read and fire loops (``dispatcher.pacing``), run for real on the embedded
store and queue: a row already held fires at its due instant while a store read hangs, and
the loops stop promptly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.pacing import Wakeup, paced
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from tests.factories import make_task
from tikk.clock import ManualClock, SystemClock
from tikk.errors import BackendUnavailable
from tikk.model import Delivery, DueEntry
from tikk.settings import DispatchSettings
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 4
SETTINGS = DispatchSettings(
    prefetch_ms=3_000, rescan_interval_ms=250, late_write_grace_s=5, lead_ms=0
)


class HangingStore(SqliteTaskStore):
    """The embedded store, whose reads of the due index hang once ``hang`` is set, as a read
    to a replica that stopped answering does until the driver gives up."""

    def __init__(self, path: str, shards: int) -> None:
        super().__init__(path, shards)
        self.hang = False
        self.hanging = 0
        self.release = asyncio.Event()
        self.returned = asyncio.Event()  # a read returned a row

    async def read_due(
        self,
        shard: int,
        after: tuple[int, str],
        until_second: int,
        limit: int,
        *,
        unsent_only: bool = False,
    ) -> list[DueEntry]:
        if self.hang:
            self.hanging += 1
            await self.release.wait()
        rows = await super().read_due(shard, after, until_second, limit, unsent_only=unsent_only)
        if rows:
            self.returned.set()
        return rows


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[HangingStore, LocalQueueConsumer]]:
    store = HangingStore(str(tmp_path / "tikk.db"), SHARDS)
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    for part in (store, queue, consumer):
        await part.start()
    dispatcher = Dispatcher(store, queue, SingleOwner(SHARDS, 1), SystemClock(), settings=SETTINGS)
    stop = asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stop))
    yield store, consumer
    store.release.set()
    stop.set()
    await asyncio.wait_for(running, 10)
    for part in (consumer, queue, store):
        await part.close()


async def published(consumer: LocalQueueConsumer, within_s: float) -> dict[str, int]:
    """Task id → fired instant of what reached the queue within ``within_s``."""
    sent: dict[str, int] = {}
    end = asyncio.get_running_loop().time() + within_s
    while asyncio.get_running_loop().time() < end:
        for m in await consumer.fetch(100):
            sent[m.delivery.task_id] = m.delivery.fired_time.ToMilliseconds()
            await consumer.commit(m)
        await asyncio.sleep(0.02)
    return sent


async def test_a_held_row_fires_on_time_while_the_reads_hang(
    parts: tuple[HangingStore, LocalQueueConsumer],
) -> None:
    store, consumer = parts
    now = SystemClock().now_ms()
    due = now + 1_500
    await store.create(make_task("held", due_ms=due, shard_count=SHARDS, created_ms=now))
    # Held once a read of its shard returned it (the prefetch covers its due second).
    await asyncio.wait_for(store.returned.wait(), 5)
    store.hang = True
    sent = await published(consumer, (due - SystemClock().now_ms()) / 1000 + 1.0)
    assert store.hanging > 0  # the reads did hang while the row fell due
    assert "held" in sent
    assert due <= sent["held"] < due + 250


async def test_the_loops_end_soon_after_the_stop(tmp_path: Path) -> None:
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    await store.start()
    await queue.start()
    settings = DispatchSettings(poll_interval_ms=60_000)  # a stop must not wait for a poll
    dispatcher = Dispatcher(store, queue, SingleOwner(SHARDS, 1), SystemClock(), settings=settings)
    stop = asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stop))
    await asyncio.sleep(0.3)
    started = asyncio.get_running_loop().time()
    stop.set()
    await asyncio.wait_for(running, 5)
    assert asyncio.get_running_loop().time() - started < 1.0
    await queue.close()
    await store.close()


async def test_a_failing_step_is_retried_after_the_backoff_not_on_every_wakeup() -> None:
    clock = ManualClock(0)
    stop = asyncio.Event()
    wakeup = Wakeup()
    calls = 0

    async def step(now_ms: int) -> int:
        nonlocal calls
        calls += 1
        wakeup.set()  # as rows held again after a failed claim would
        if calls >= 3:
            stop.set()
        raise BackendUnavailable("store down")

    started = asyncio.get_running_loop().time()
    await paced(step, name="fire", clock=clock, stop=stop, wakeup=wakeup, error_backoff_ms=100)
    assert calls == 3
    assert asyncio.get_running_loop().time() - started >= 0.2  # two backoffs, not a spin


class StallingQueue(LocalReadyQueue):
    """The embedded queue, whose publishes of task "slow" hang until ``release`` is set, as a
    publish to a partition whose leader just died does."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.release = asyncio.Event()

    async def publish(self, deliveries: Sequence[Delivery]) -> None:
        if any(d.entry.task_id == "slow" for d in deliveries):
            await self.release.wait()
        await super().publish(deliveries)


async def test_a_slow_batch_does_not_hold_back_the_next(tmp_path: Path) -> None:
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    queue = StallingQueue(str(tmp_path / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    for part in (store, queue, consumer):
        await part.start()
    now = SystemClock().now_ms()
    slow, fast = now + 1_000, now + 1_300
    await store.create(make_task("slow", due_ms=slow, shard_count=SHARDS, created_ms=now))
    await store.create(make_task("fast", due_ms=fast, shard_count=SHARDS, created_ms=now))
    dispatcher = Dispatcher(store, queue, SingleOwner(SHARDS, 1), SystemClock(), settings=SETTINGS)
    stop = asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stop))
    sent = await published(consumer, (fast - SystemClock().now_ms()) / 1000 + 1.0)
    assert "slow" not in sent  # still in its publish
    assert fast <= sent["fast"] < fast + 250
    queue.release.set()
    assert "slow" in await published(consumer, 2.0)  # and out once its queue answers
    stop.set()
    await asyncio.wait_for(running, 10)
    for part in (consumer, queue, store):
        await part.close()
