"""The server side of late writes: rows it writes never land behind a dispatch cursor unseen.

Real embedded store, queue and run history; the server and the dispatcher each have their own
manual clock, so clock skew and a write that stalls are played out exactly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from server.ops.late_writes import LateWriteGuard
from server.ops.tasks import TaskOps
from tests.factories import T0, make_task
from tests.ops_parts import quota_gate
from tikk.clock import ManualClock
from tikk.errors import BackendUnavailable, TikkError
from tikk.model import Task
from tikk.settings import DispatchSettings
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 2


class StallingStore(SqliteTaskStore):
    """The embedded store, whose next create becomes durable only after ``stall`` runs (the
    dispatcher keeps going meanwhile), like a write stuck in a paused database."""

    stall: object = None
    # The answer to the stalled create is lost (the write itself lands).
    lose_answer = False

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        stalled = callable(self.stall)
        if callable(self.stall):
            stall, self.stall = self.stall, None
            await stall()
        outcomes = await super().create_many(tasks, new_ids=new_ids)
        if stalled and self.lose_answer:
            raise BackendUnavailable("cassandra: request timed out")
        return outcomes


@dataclass
class Rig:
    store: StallingStore
    tasks: TaskOps
    guard: LateWriteGuard
    dispatcher: Dispatcher
    consumer: LocalQueueConsumer
    server_clock: ManualClock
    dispatcher_clock: ManualClock

    async def run_dispatcher(self, until_ms: int) -> list[str]:
        """Tick every 100 ms up to ``until_ms`` (dispatcher clock); returns what went out."""
        sent = []
        while self.dispatcher_clock.now_ms() < until_ms:
            self.dispatcher_clock.advance(100)
            await self.dispatcher.tick(self.dispatcher_clock.now_ms())
            for m in await self.consumer.fetch(1_000):
                await self.consumer.commit(m)
                sent.append(m.delivery.task_id)
        return sent


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = StallingStore(str(tmp_path / "tikk.db"), SHARDS)
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    await store.start()
    server_clock, dispatcher_clock = ManualClock(T0), ManualClock(T0)
    guard = LateWriteGuard(store, server_clock, grace_ms=5_000)
    settings = DispatchSettings(late_write_grace_s=5, cursor_flush_interval_ms=0)
    owner = SingleOwner(SHARDS, 1)
    dispatcher = Dispatcher(store, queue, owner, dispatcher_clock, settings=settings)
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    await queue.start()
    await consumer.start()
    async with quota_gate(str(tmp_path / "tikk.db"), server_clock) as quotas:
        tasks = TaskOps(store, queue, server_clock, guard=guard, quotas=quotas)
        yield Rig(store, tasks, guard, dispatcher, consumer, server_clock, dispatcher_clock)
    await consumer.close()
    await queue.close()
    await store.close()


async def test_a_create_that_became_durable_too_late_is_moved_and_fires(rig: Rig) -> None:
    await rig.run_dispatcher(T0 + 20_000)
    rig.server_clock.set(T0 + 20_000)
    due_now = make_task("stalled", due_ms=T0 + 20_000, shard_count=SHARDS)

    async def stall() -> None:
        # The write hangs for 9 s while the dispatcher sweeps past its second.
        await rig.run_dispatcher(T0 + 29_000)
        rig.server_clock.set(T0 + 29_000)

    rig.store.stall = stall
    stored, created = await rig.tasks.create(due_now)
    assert created
    assert stored.due_ms >= T0 + 29_000  # moved to when it became durable
    assert stored.scheduled_ms == due_now.scheduled_ms  # same occurrence, same key
    assert await rig.run_dispatcher(T0 + 35_000) == ["stalled"]


async def test_a_server_clock_behind_the_dispatchers_cannot_write_behind_a_cursor(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    await rig.run_dispatcher(T0 + 30_000)
    rig.server_clock.set(T0 + 20_000)  # ten seconds behind the dispatcher
    await rig.guard.refresh()
    stored, _ = await rig.tasks.create(make_task("skewed", due_ms=T0 + 20_000, shard_count=SHARDS))
    cursor = await rig.store.get_cursor(stored.shard)
    assert stored.due_ms // 1000 > cursor.second
    assert "clock skew" in caplog.text
    assert await rig.run_dispatcher(T0 + 40_000) == ["skewed"]


async def test_rows_well_ahead_of_the_cursors_are_left_alone(rig: Rig) -> None:
    await rig.run_dispatcher(T0 + 30_000)
    rig.server_clock.set(T0 + 30_000)
    await rig.guard.refresh()
    task = make_task("on-time", due_ms=T0 + 30_000, shard_count=SHARDS)
    stored, _ = await rig.tasks.create(task)
    assert stored.due_ms == task.due_ms
    assert await rig.run_dispatcher(T0 + 31_000) == ["on-time"]


async def test_a_write_whose_answer_was_lost_is_found_and_moved(rig: Rig) -> None:
    # The store timed out, the client got UNAVAILABLE, and the write landed anyway, late.
    await rig.run_dispatcher(T0 + 20_000)
    rig.server_clock.set(T0 + 20_000)

    async def stall() -> None:
        await rig.run_dispatcher(T0 + 29_000)
        rig.server_clock.set(T0 + 29_000)

    rig.store.stall, rig.store.lose_answer = stall, True
    with pytest.raises(BackendUnavailable):
        await rig.tasks.create(make_task("orphan", due_ms=T0 + 20_000, shard_count=SHARDS))
    assert rig.guard.in_doubt == 1
    await rig.guard.settle_doubts()
    assert rig.guard.in_doubt == 0
    assert await rig.run_dispatcher(T0 + 35_000) == ["orphan"]


async def test_a_write_that_never_landed_is_given_up_after_settling(rig: Rig) -> None:
    async def down() -> None:
        raise BackendUnavailable("cassandra: no host available")

    rig.store.stall = down
    with pytest.raises(BackendUnavailable):
        await rig.tasks.create(make_task("never", shard_count=SHARDS))
    await rig.guard.settle_doubts()
    assert rig.guard.in_doubt == 1  # absent so far; a late write could still land
    rig.server_clock.advance(30_000)
    await rig.guard.settle_doubts()
    assert rig.guard.in_doubt == 0
