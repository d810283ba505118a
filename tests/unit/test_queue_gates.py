"""Paused and rate-limited queues (dispatcher.queue_gates), tick by tick, on the embedded
store and queue with a manual clock: what fires, in which order, when, and what is parked."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.queue_gates import QueueGates
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.clock import ManualClock
from tikk.errors import BackendUnavailable
from tikk.model import DueEntry, TaskState
from tikk.queue_holds import SKIPPED, QueueControl
from tikk.settings import DispatchSettings
from tikk.store.sqlite.queue_holds import SqliteQueueHoldStore
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 4
SETTINGS = DispatchSettings(
    cursor_flush_interval_ms=0, queue_control_refresh_ms=0, release_per_s=100, lead_ms=0
)


@dataclass
class Fired:
    task_id: str
    due_ms: int
    fired_ms: int


@dataclass
class Rig:
    store: SqliteTaskStore
    holds: SqliteQueueHoldStore
    consumer: LocalQueueConsumer
    queue: LocalReadyQueue

    def dispatcher(self, epoch: int = 1) -> Dispatcher:
        owner = SingleOwner(SHARDS, epoch)
        return Dispatcher(self.store, self.queue, owner, ManualClock(T0), settings=SETTINGS,
                          holds=self.holds)  # fmt: skip

    async def create(self, count: int, due_ms: int, step_ms: int, queue: str = "q") -> None:
        await self.store.create_many([
            make_task(f"{queue}{i}", due_ms=due_ms + i * step_ms, queue=queue, shard_count=SHARDS)
            for i in range(count)
        ])  # fmt: skip

    async def run(
        self, d: Dispatcher, start_ms: int, end_ms: int, step_ms: int = 50
    ) -> list[Fired]:
        fired: list[Fired] = []
        for now in range(start_ms, end_ms, step_ms):
            await d.tick(now)
            msgs = await self.consumer.fetch(10_000)
            for m in msgs:
                await self.consumer.commit(m)
                due = m.delivery.due_time.ToMilliseconds()
                fired.append(Fired(m.delivery.task_id, due, m.delivery.fired_time.ToMilliseconds()))
        return fired

    async def pause(self, queue: str = "q", **settings: Any) -> None:
        await self.holds.set_control(QueueControl(queue, paused=True, paused_ms=T0, **settings))

    async def resume(self, queue: str = "q", **settings: Any) -> None:
        await self.holds.set_control(QueueControl(queue, **settings))


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    holds = SqliteQueueHoldStore(str(tmp_path / "tikk.db"))
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q", "other"], 60_000)
    for part in (store, holds, queue, consumer):
        await part.start()
    yield Rig(store, holds, consumer, queue)
    for part in (consumer, queue, holds, store):
        await part.close()


async def test_a_paused_queue_parks_its_rows_while_other_queues_fire(rig: Rig) -> None:
    await rig.pause()
    await rig.create(40, T0 + 1_000, 100)
    await rig.create(10, T0 + 1_000, 100, queue="other")
    d = rig.dispatcher()
    fired = await rig.run(d, T0, T0 + 20_000)
    assert sorted(f.task_id for f in fired) == sorted(f"other{i}" for i in range(10))
    assert await rig.holds.count_parked("q", 1_000) == 40
    page = await rig.store.list_tasks("default", "q", TaskState.SCHEDULED, 100, "")
    assert len(page.items) == 40  # still scheduled, at their attempt and due time
    # Nothing unsent holds the cursors back: a long pause costs no memory.
    for shard, cursor in (await rig.store.get_cursors()).items():
        assert cursor.second >= second_of(T0 + 5_000), shard
    assert d.held == 0


async def test_on_resume_rows_fire_once_in_due_order_at_the_bounded_rate(rig: Rig) -> None:
    await rig.pause()
    await rig.create(300, T0 + 1_000, 10)
    d = rig.dispatcher()
    assert await rig.run(d, T0, T0 + 60_000, 500) == []
    await rig.resume()
    fired = await rig.run(d, T0 + 60_000, T0 + 66_000)
    assert len(fired) == 300 and len({f.task_id for f in fired}) == 300
    assert [f.due_ms for f in fired] == sorted(f.due_ms for f in fired)  # due order
    # Each keeps its due time: its lateness is how long it was held.
    assert all(f.due_ms < T0 + 5_000 <= T0 + 60_000 <= f.fired_ms for f in fired)
    # 100/s: three seconds for 300 (a tenth of a second's worth may go at once).
    spread = fired[-1].fired_ms - fired[0].fired_ms
    assert 2_700 <= spread <= 3_500, spread
    await rig.run(d, T0 + 66_000, T0 + 66_200)
    assert await rig.holds.count_parked("q", 1_000) == 0


async def test_rows_held_longer_than_the_queue_allows_are_skipped_and_recorded(rig: Rig) -> None:
    await rig.pause(skip_older_than_ms=30_000)
    await rig.create(5, T0 + 1_000, 100)  # 59 s old at the resume
    await rig.store.create(make_task("recent", due_ms=T0 + 45_000, shard_count=SHARDS))
    d = rig.dispatcher()
    await rig.run(d, T0, T0 + 60_000, 500)
    await rig.resume(skip_older_than_ms=30_000)
    fired = await rig.run(d, T0 + 60_000, T0 + 62_000)
    assert [f.task_id for f in fired] == ["recent"]
    for i in range(5):
        task = await rig.store.get("default", f"q{i}")
        assert (task.state, task.last_error_type) == (TaskState.CANCELLED, SKIPPED)
        assert "longer than its limit of 30 s" in task.last_error_message
    assert d.gates is not None and d.gates.skipped == 5
    assert await rig.holds.count_parked("q", 1_000) == 0


async def test_a_rate_limited_queue_fires_no_faster_than_its_rate(rig: Rig) -> None:
    await rig.resume(rate_per_s=20)
    await rig.create(100, T0 + 1_000, 0)  # all due at once
    await rig.create(10, T0 + 1_000, 0, queue="other")
    d = rig.dispatcher()
    fired = await rig.run(d, T0, T0 + 10_000)
    limited = sorted(f.fired_ms for f in fired if f.task_id.startswith("q"))
    assert len(limited) == 100 and len({f.task_id for f in fired}) == 110
    for i, at in enumerate(limited):  # any one second holds at most 20 (and a burst of 2)
        assert sum(1 for t in limited[i:] if t < at + 1_000) <= 22
    assert limited[-1] - limited[0] >= 4_000
    # The other queue is not held back by it.
    assert all(f.fired_ms == T0 + 1_000 for f in fired if f.task_id.startswith("other"))


async def test_a_task_cancelled_while_parked_never_fires(rig: Rig) -> None:
    await rig.pause()
    await rig.create(3, T0 + 1_000, 100)
    d = rig.dispatcher()
    await rig.run(d, T0, T0 + 10_000, 500)
    await rig.store.cancel("default", "q1", ManualClock(T0 + 10_000))
    await rig.resume()
    fired = await rig.run(d, T0 + 10_000, T0 + 12_000)
    assert sorted(f.task_id for f in fired) == ["q0", "q2"]
    assert await rig.holds.count_parked("q", 1_000) == 0


async def test_a_new_owner_releases_what_the_one_before_parked(rig: Rig) -> None:
    await rig.pause()
    await rig.create(20, T0 + 1_000, 100)
    first = rig.dispatcher(epoch=1)
    await rig.run(first, T0, T0 + 10_000, 500)
    assert first.gates is not None and first.gates.parked == 20
    await rig.resume()
    second = rig.dispatcher(epoch=2)  # the first died: nothing of it is in memory
    fired = await rig.run(second, T0 + 10_000, T0 + 12_000)
    assert sorted(f.task_id for f in fired) == sorted(f"q{i}" for i in range(20))


async def test_rows_due_behind_a_backlog_wait_their_turn(rig: Rig) -> None:
    await rig.resume(rate_per_s=10)
    await rig.create(30, T0 + 1_000, 0)
    d = rig.dispatcher()
    fired = await rig.run(d, T0, T0 + 2_000)
    await rig.store.create(make_task("late", due_ms=T0 + 2_000, shard_count=SHARDS))
    fired += await rig.run(d, T0 + 2_000, T0 + 6_000)
    order = [f.task_id for f in fired]
    assert order[-1] == "late" and len(order) == 31  # behind the 30 due before it


class Shifting:
    """Ownership an owner loses and regains (a rebalance, a session that expired)."""

    def __init__(self, owned: dict[int, int]) -> None:
        self.now = owned

    def owned(self) -> dict[int, int]:
        return self.now

    async def start(self) -> None: ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


async def test_rows_released_before_their_shard_was_lost_are_released_again_on_its_return(
    rig: Rig,
) -> None:
    await rig.pause()
    await rig.create(6, T0 + 1_000, 100)
    owner = Shifting(dict.fromkeys(range(SHARDS), 1))
    d = Dispatcher(rig.store, rig.queue, owner, ManualClock(T0), settings=SETTINGS,
                   holds=rig.holds)  # fmt: skip
    await rig.run(d, T0, T0 + 10_000, 500)
    assert await rig.holds.count_parked("q", 100) == 6
    await rig.resume()
    failing = rig.queue.publish

    async def refuse(deliveries: object) -> None:
        raise BackendUnavailable("queue outage")

    rig.queue.publish = refuse  # type: ignore[method-assign]
    assert await rig.run(d, T0 + 10_000, T0 + 10_500) == []  # released, not accepted
    owner.now = {}  # every shard lost, then regained at a new epoch
    await rig.run(d, T0 + 10_500, T0 + 11_000)
    owner.now = dict.fromkeys(range(SHARDS), 2)
    rig.queue.publish = failing  # type: ignore[method-assign]
    fired = await rig.run(d, T0 + 11_000, T0 + 14_000)
    assert sorted(f.task_id for f in fired) == [f"q{i}" for i in range(6)]


async def test_a_queue_resumed_long_ago_parks_nothing_on_a_newly_owned_shard(rig: Rig) -> None:
    await rig.resume()  # a control, but neither paused nor limited
    await rig.create(20, T0 + 1_000, 0)
    owner = Shifting({})
    d = Dispatcher(rig.store, rig.queue, owner, ManualClock(T0), settings=SETTINGS,
                   holds=rig.holds)  # fmt: skip
    await d.tick(T0 + 990)
    owner.now = dict.fromkeys(range(SHARDS), 1)  # taken over just as its rows come due
    fired = await rig.run(d, T0 + 1_000, T0 + 3_000, 10)
    assert len(fired) == 20 and d.gates is not None and d.gates.parked == 0
    assert all(f.fired_ms == T0 + 1_000 for f in fired)


async def test_a_row_parked_behind_the_reads_loses_none_of_the_rows_read_before_it(
    rig: Rig,
) -> None:
    # Its lane had read a, b and c and released a; a row due between b and c comes back
    # parked (a failing queue held it): the lane must read b again, not only it and c.
    await rig.holds.set_control(QueueControl("q", rate_per_s=1))
    rows = {name: make_task(name, due_ms=T0 + at, shard_count=SHARDS).entry()
            for name, at in (("a", 100), ("b", 200), ("e", 250), ("c", 300))}  # fmt: skip
    same_shard = [dataclasses.replace(r, shard=0) for r in rows.values()]
    a, b, e, c = same_shard
    await rig.holds.park([a, b, c])
    gates = QueueGates(rig.holds, SHARDS, SETTINGS)
    await gates.refresh(dict.fromkeys(range(SHARDS), 1), T0)
    assert await gates.release(T0) == [a]  # one token: b and c stay read, not released
    go, parked = await gates.admit([e], T0 + 10)
    assert (go, parked) == ([], [e])
    released: list[DueEntry] = []
    for now in range(T0 + 1_000, T0 + 10_000, 1_000):
        released += await gates.release(now)
    assert released == [b, e, c]


class _SlowReads:
    """The hold store, with each read of parked rows held after it read until ``go`` is
    set: a read whose answer predates a park that finishes while it is in flight."""

    def __init__(self, holds: SqliteQueueHoldStore) -> None:
        self._holds = holds
        self.reading = asyncio.Event()
        self.go = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._holds, name)

    async def read_parked(self, *args: Any) -> list[DueEntry]:
        rows: list[DueEntry] = await self._holds.read_parked(*args)
        self.reading.set()
        await self.go.wait()
        return rows


async def test_a_row_parked_while_a_release_reads_its_lane_is_released(rig: Rig) -> None:
    # The dispatcher fires in batches apart from its reads (dispatcher.pacing), so a batch
    # may park a row while a release is reading that row's lane: the read's answer, taken
    # before the row was written, must not mark the lane drained over it.
    await rig.holds.set_control(QueueControl("q", rate_per_s=1_000))
    late = dataclasses.replace(make_task("late", due_ms=T0, shard_count=SHARDS).entry(), shard=0)
    slow = _SlowReads(rig.holds)
    gates = QueueGates(slow, SHARDS, SETTINGS)
    await gates.refresh({0: 1}, T0)
    releasing = asyncio.create_task(gates.release(T0))
    await slow.reading.wait()  # the lane read (empty so far), its answer not yet used
    admitting = asyncio.create_task(gates.admit([late], T0))
    await asyncio.sleep(0)  # it decides now, or waits for the read to be used
    slow.go.set()
    assert await releasing == []
    go, _ = await admitting
    released: list[DueEntry] = []
    for now in range(T0 + 100, T0 + 1_000, 100):
        released += await gates.release(now)
    assert go + released == [late]  # at once (the lane was empty) or released after


async def test_a_row_a_release_takes_from_its_lane_meanwhile_is_not_parked_over_it(
    rig: Rig,
) -> None:
    # A new owner reads a row from the due index while its lane holds the copy the owner
    # before it parked. If a release reading that lane takes the copy while the row is
    # admitted, the row must not be parked over it: the dispatcher settles what was parked,
    # which finishes the release, and the row was then unparked and never published.
    await rig.holds.set_control(QueueControl("q"))  # resumed: no longer paused
    row = dataclasses.replace(make_task("r", due_ms=T0, shard_count=SHARDS).entry(), shard=0)
    await rig.holds.park([row])
    slow = _SlowReads(rig.holds)
    gates = QueueGates(slow, SHARDS, SETTINGS)
    await gates.refresh({0: 1}, T0)
    releasing = asyncio.create_task(gates.release(T0))
    await slow.reading.wait()  # the lane read found the copy; its answer not yet used
    admitting = asyncio.create_task(gates.admit([row], T0))
    await asyncio.sleep(0)  # it decides now, or waits for the read to be used
    slow.go.set()
    assert await releasing == [row]
    assert await admitting == ([row], [])
    assert gates.is_released(row)
