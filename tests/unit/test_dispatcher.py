"""The dispatcher, tick by tick, on the embedded store and queue with a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.pacing import FIRE_WINDOW_MS
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.clock import ManualClock
from tikk.errors import BackendUnavailable
from tikk.model import Delivery, DueEntry, TaskState
from tikk.settings import DispatchSettings
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 4
# At the due instant (no lead): these tests time the dispatcher itself; the lead's own
# tests give one.
SETTINGS = DispatchSettings(
    prefetch_ms=2_000,
    rescan_interval_ms=250,
    late_write_grace_s=5,
    cursor_flush_interval_ms=0,
    lead_ms=0,
)


class SwitchableQueue(LocalReadyQueue):
    """The embedded queue, with a switch that makes publishing fail like an outage."""

    failing = False
    refused: frozenset[str] = frozenset()

    async def publish(self, deliveries: Sequence[Delivery]) -> None:
        if self.failing or any(d.entry.queue in self.refused for d in deliveries):
            raise BackendUnavailable("queue outage")
        await super().publish(deliveries)


class CountingStore(SqliteTaskStore):
    rows_read = 0
    ids_read: set[str] = set()

    async def read_due(
        self,
        shard: int,
        after: tuple[int, str],
        until_second: int,
        limit: int,
        *,
        unsent_only: bool = False,
    ) -> list[DueEntry]:
        rows = await super().read_due(shard, after, until_second, limit, unsent_only=unsent_only)
        self.rows_read += len(rows)
        self.ids_read = self.ids_read | {r.task_id for r in rows}
        return rows


@dataclass
class Rig:
    store: CountingStore
    queue: SwitchableQueue
    consumer: LocalQueueConsumer
    clock: ManualClock
    tmp: Path

    def dispatcher(self, epoch: int = 1, settings: DispatchSettings = SETTINGS) -> Dispatcher:
        owner = SingleOwner(SHARDS, epoch)
        return Dispatcher(self.store, self.queue, owner, self.clock, settings=settings)

    async def run(self, d: Dispatcher, instants: range) -> list[tuple[str, int]]:
        """Tick ``d`` at each instant; what it published meanwhile, in order."""
        sent: list[tuple[str, int]] = []
        for now in instants:
            await d.tick(now)
            sent += await self.published()
        return sent

    async def published(self) -> list[tuple[str, int]]:
        msgs = await self.consumer.fetch(10_000)
        for m in msgs:
            await self.consumer.commit(m)
        return [(m.delivery.task_id, m.delivery.fired_time.ToMilliseconds()) for m in msgs]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = CountingStore(str(tmp_path / "tikk.db"), SHARDS)
    await store.start()
    queue = SwitchableQueue(str(tmp_path / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    await queue.start()
    await consumer.start()
    yield Rig(store, queue, consumer, ManualClock(T0), tmp_path)
    await consumer.close()
    await queue.close()
    await store.close()


async def test_fires_at_due_instant_not_before(rig: Rig) -> None:
    due = T0 + 10_123
    await rig.store.create(make_task("a", due_ms=due, shard_count=SHARDS))
    d = rig.dispatcher()
    for now in (T0, T0 + 8_500, due - 1):
        wake = await d.tick(now)
        assert await rig.published() == []
    assert wake == due  # held in memory: the next step is at the due millisecond
    await d.tick(due)
    assert await rig.published() == [("a", due)]


LEAD = replace(SETTINGS, lead_ms=400)


async def test_a_task_goes_out_its_lead_before_due_and_not_sooner(rig: Rig) -> None:
    due = T0 + 10_123
    await rig.store.create(make_task("a", due_ms=due, shard_count=SHARDS))
    d = rig.dispatcher(settings=LEAD)
    for now in (T0, T0 + 8_500, due - 400 - FIRE_WINDOW_MS - 1):
        wake = await d.tick(now)
        assert await rig.published() == []
    assert wake == due - 400
    await d.tick(due - 400)
    [message] = await rig.consumer.fetch(10)
    # The delivery names its due time: the worker holds it until then (worker_sdk.lead).
    assert message.delivery.fired_time.ToMilliseconds() == due - 400
    assert message.delivery.due_time.ToMilliseconds() == due


async def test_a_task_created_inside_its_lead_goes_out_when_read(rig: Rig) -> None:
    d = rig.dispatcher(settings=LEAD)
    for now in range(T0, T0 + 10_000, 100):
        await d.tick(now)
    now = T0 + 10_000
    await rig.store.create(make_task("soon", due_ms=now + 300, shard_count=SHARDS))
    await rig.store.create(make_task("later", due_ms=now + 1_200, shard_count=SHARDS))
    sent = await rig.run(d, range(now, now + 2_000, 50))
    fired = dict(sent)
    assert now <= fired["soon"] <= now + LEAD.rescan_interval_ms + 50  # before it is due
    # Read by a rescan within an interval of its second (rows created inside the prefetch
    # window are not re-read a whole lead ahead: that tripled the rows read); out when read.
    assert now + 1_200 - 400 - FIRE_WINDOW_MS <= fired["later"] < now + 1_200


async def test_rows_going_out_within_the_window_go_together(rig: Rig) -> None:
    due = T0 + 10_000
    close = [make_task(f"c{i}", due_ms=due + i * 10, shard_count=SHARDS) for i in range(5)]
    await rig.store.create_many([*close, make_task("apart", due_ms=due + 200, shard_count=SHARDS)])
    d = rig.dispatcher(settings=LEAD)
    for now in (T0, T0 + 8_000):
        await d.tick(now)
    await d.tick(due - 400)
    assert sorted(await rig.published()) == [(f"c{i}", due - 400) for i in range(5)]
    await d.tick(due - 200)  # out of the window: on its own
    assert await rig.published() == [("apart", due - 200)]


def test_ticks_and_start_deadlines_go_out_at_their_instant() -> None:
    task = make_task("a", due_ms=T0, shard_count=SHARDS).entry()
    tick = replace(task, attempt=0, schedule_id="s")
    assert (task.goes_out_ms(400), tick.goes_out_ms(400)) == (T0 - 400, T0)
    assert task.start_deadline().goes_out_ms(400) == task.start_deadline().due_ms


async def test_each_row_is_published_once_across_many_ticks(rig: Rig) -> None:
    tasks = [make_task(f"t{i}", due_ms=T0 + 1_000 + i * 37, shard_count=SHARDS) for i in range(300)]
    await rig.store.create_many(tasks)
    d = rig.dispatcher()
    sent = await rig.run(d, range(T0, T0 + 30_000, 50))
    assert sorted(t for t, _ in sent) == sorted(t.task_id for t in tasks)
    due = {t.task_id: t.due_ms for t in tasks}
    assert all(due[t] <= fired < due[t] + 50 for t, fired in sent)


async def test_cursor_moves_only_after_the_queue_acknowledged(rig: Rig) -> None:
    task = make_task("a", due_ms=T0 + 1_000, shard_count=SHARDS)
    await rig.store.create(task)
    d = rig.dispatcher()
    rig.queue.failing = True
    for now in range(T0, T0 + 20_000, 500):
        await d.tick(now + 1_000)  # a queue outage is that queue's problem, not the tick's
    assert d.stats.publish_failures >= 5  # retried with backoff, not on every tick
    assert d.stats.publish_failures <= 12
    # Far past the grace period, yet the cursor waits for the unacknowledged row.
    assert (await rig.store.get_cursor(task.shard)).second < second_of(task.due_ms)
    rig.queue.failing = False
    sent = await rig.run(d, range(T0 + 21_000, T0 + 40_000, 100))
    assert [t for t, _ in sent] == ["a"]
    assert sent[0][1] <= T0 + 21_000 + SETTINGS.max_queue_backoff_ms
    assert (await rig.store.get_cursor(task.shard)).second >= second_of(task.due_ms)


async def test_a_new_owner_does_not_resend_what_the_queue_accepted(rig: Rig) -> None:
    task = make_task("a", due_ms=T0 + 1_000, shard_count=SHARDS)
    await rig.store.create(task)
    first = rig.dispatcher(epoch=1)
    await first.tick(T0 + 1_000)
    assert [t for t, _ in await rig.published()] == ["a"]
    # `first` dies before its cursor passes the row (it trails by the grace period).
    second = rig.dispatcher(epoch=2)
    for now in range(T0 + 1_500, T0 + 12_000, 100):
        await second.tick(now)
    assert await rig.published() == []
    assert (second.stats.handed_off_skipped, second.stats.resent) == (1, 0)


async def test_a_new_owner_resends_what_was_in_flight_and_counts_it(rig: Rig) -> None:
    task = make_task("a", due_ms=T0 + 1_000, shard_count=SHARDS)
    await rig.store.create(task)
    first = rig.dispatcher(epoch=1)
    rig.queue.failing = True  # claimed in the store, never accepted by the queue
    await first.tick(T0 + 1_000)
    assert (await rig.store.get("default", "a")).state is TaskState.DISPATCHED
    rig.queue.failing = False
    second = rig.dispatcher(epoch=2)
    await second.tick(T0 + 1_500)
    assert [t for t, _ in await rig.published()] == ["a"]  # at-least-once
    assert second.stats.resent == 1


async def test_cancelled_task_is_not_fired_even_when_held(rig: Rig) -> None:
    await rig.store.create(make_task("a", due_ms=T0 + 1_500, shard_count=SHARDS))
    d = rig.dispatcher()
    await d.tick(T0)
    assert d.held == 1
    await rig.store.cancel("default", "a", ManualClock(T0 + 100))
    await d.tick(T0 + 1_500)
    assert await rig.published() == []
    assert d.stats.skipped == 1


async def test_task_written_into_an_already_scanned_second_still_fires(rig: Rig) -> None:
    d = rig.dispatcher()
    for now in range(T0, T0 + 10_000, 100):
        await d.tick(now)
    now = T0 + 10_000
    # Created "due now" (the server never accepts a due time before its own now) and one due
    # inside the prefetch window that was already read.
    await rig.store.create(make_task("now", due_ms=now, shard_count=SHARDS))
    await rig.store.create(make_task("soon", due_ms=now + 1_200, shard_count=SHARDS))
    sent = await rig.run(d, range(now, now + 2_000, 100))
    fired = dict(sent)
    assert set(fired) == {"now", "soon"}
    assert now <= fired["now"] <= now + SETTINGS.rescan_interval_ms + 100
    assert fired["soon"] == now + 1_200


async def test_rescans_do_not_re_read_the_whole_prefetch_window(rig: Rig) -> None:
    # 200 tasks a second for 4 s. With a rescan every 250 ms over the last second and the
    # 2 s prefetch window, each row was read 17 times (with its forward read and its sweep);
    # over the last second and one interval ahead, 11; leaving out the rows handed off, 5.7;
    # and in the sweep too, 4.7.
    await rig.store.create_many([
        make_task(f"t{i}", due_ms=T0 + 2_000 + i * 5, shard_count=SHARDS) for i in range(800)
    ])  # fmt: skip
    d = rig.dispatcher()
    for now in range(T0, T0 + 12_000, 50):
        await d.tick(now)
    assert {task_id for task_id, _ in await rig.published()} == {f"t{i}" for i in range(800)}
    assert d.stats.rows_read / 800 <= 5.2


async def test_late_write_within_grace_period_fires(rig: Rig) -> None:
    d = rig.dispatcher()
    for now in range(T0, T0 + 10_000, 100):
        await d.tick(now)
    # A writer whose clock lags by 3 s (less than the 5 s grace) writes a task "due now".
    late = make_task("skewed", due_ms=T0 + 7_000, shard_count=SHARDS)
    await rig.store.create(late)
    sent = await rig.run(d, range(T0 + 10_000, T0 + 16_000, 100))
    assert [t for t, _ in sent] == ["skewed"]


async def test_catch_up_after_downtime_fires_everything_once(rig: Rig) -> None:
    tasks = [make_task(f"t{i}", due_ms=T0 + i * 2_000, shard_count=SHARDS) for i in range(300)]
    await rig.store.create_many(tasks)
    d = rig.dispatcher(settings=DispatchSettings(scan_limit=17, cursor_flush_interval_ms=0))
    now = T0 + 700_000  # the dispatcher was down for more than 11 minutes
    await d.tick(now)
    sent = await rig.published()
    assert sorted(t for t, _ in sent) == sorted(t.task_id for t in tasks)
    assert all(fired == now for _, fired in sent)


async def test_poll_reads_only_what_is_due(rig: Rig) -> None:
    far = [
        make_task(f"far{i}", due_ms=T0 + 86_400_000 + i, shard_count=SHARDS) for i in range(5_000)
    ]
    near = [make_task(f"near{i}", due_ms=T0 + 1_000 + i, shard_count=SHARDS) for i in range(20)]
    await rig.store.create_many(far + near)
    d = rig.dispatcher()
    for now in range(T0, T0 + 4_000, 100):
        await d.tick(now)
    assert len(await rig.published()) == 20
    # Rescans re-read the last few seconds; the 5,000 rows due tomorrow are never touched.
    assert not any(i.startswith("far") for i in rig.store.ids_read)
    assert rig.store.rows_read <= 20 * 20


async def test_older_owner_is_fenced_and_stops_moving_the_cursor(rig: Rig) -> None:
    old, new = rig.dispatcher(epoch=1), rig.dispatcher(epoch=2)
    await new.tick(T0 + 20_000)
    await old.tick(T0 + 40_000)
    assert old._shards == {}  # every shard was refused: it stops acting on them
    cursor = await rig.store.get_cursor(0)
    assert cursor.epoch == 2


async def test_a_queue_that_refuses_deliveries_holds_back_no_other_queue(rig: Rig) -> None:
    good = [make_task(f"g{i}", due_ms=T0 + 1_000 + i, shard_count=SHARDS) for i in range(20)]
    bad = [
        make_task(f"b{i}", due_ms=T0 + 1_000 + i, queue="bad", shard_count=SHARDS)
        for i in range(20)
    ]
    await rig.store.create_many(good + bad)
    rig.queue.refused = frozenset({"bad"})
    d = rig.dispatcher()
    sent = await rig.run(d, range(T0, T0 + 15_000, 100))
    assert sorted(t for t, _ in sent) == sorted(t.task_id for t in good)
    assert all(fired < T0 + 1_200 for _, fired in sent)  # on time despite the bad queue
    rig.queue.refused = frozenset()
    bad_consumer = LocalQueueConsumer(str(rig.tmp / "queue.db"), ["bad"], 60_000)
    try:
        await bad_consumer.start()
        for now in range(T0 + 15_000, T0 + 40_000, 100):
            await d.tick(now)
        later = await bad_consumer.fetch(100)
        assert sorted(m.delivery.task_id for m in later) == sorted(t.task_id for t in bad)
    finally:
        await bad_consumer.close()
