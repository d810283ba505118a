"""A paused queue at scale, on both stores: ``TIKK_HOLD_SCALE_TASKS`` tasks (2,000 in the
suite; more by hand: ``TIKK_HOLD_SCALE_TASKS=50000 pytest -s
tests/contract/test_queue_hold_scale.py``) fall due while their queue is paused and are
parked, then released on resume. Each fires once, in due order; the rates print beside the
same dispatcher firing the same tasks in a queue nobody paused."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from tests.contract.conftest import SHARDS, HoldBackend
from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.clock import ManualClock
from tikk.model import Cursor
from tikk.queue_holds import QueueControl
from tikk.settings import DispatchSettings
from worker_sdk.queues.local import LocalQueueConsumer

SIZE = int(os.environ.get("TIKK_HOLD_SCALE_TASKS", "2000"))
# Released as fast as the dispatcher can: the bound is what is measured.
SETTINGS = DispatchSettings(cursor_flush_interval_ms=0, queue_control_refresh_ms=0,
                            release_per_s=10_000_000)  # fmt: skip


async def fire_all(
    d: Dispatcher, consumer: LocalQueueConsumer, start_ms: int, until_ms: int = 0
) -> tuple[list[str], float]:
    """Tick every 50 ms of the manual clock (at least to ``until_ms``) until nothing more is
    published for 2 s; what was published, and the seconds until the last of it."""
    fired: list[str] = []
    began = last = time.perf_counter()
    now, quiet = start_ms, 0
    while quiet < 2_000 or now < until_ms:
        await d.tick(now)
        msgs = await consumer.fetch(100_000)
        for m in msgs:
            await consumer.commit(m)
        if msgs:
            fired += [m.delivery.task_id for m in msgs]
            last = time.perf_counter()
        quiet = 0 if msgs else quiet + 50
        now += 50
    return fired, last - began


async def test_a_paused_queue_parks_and_releases_every_task_once_in_due_order(
    hold_backend: HoldBackend, tmp_path: Path
) -> None:
    store, holds = hold_backend.tasks, hold_backend.holds
    made = [
        make_task(f"{q}{i:07}", queue=q, due_ms=T0 + at + i, shard_count=SHARDS)
        for q, at in (("free", 5_000), ("held", 100_000)) for i in range(SIZE)
    ]  # fmt: skip
    for at in range(0, len(made), 1_000):
        await store.create_many(made[at : at + 1_000])
    # As ``tikk migrate`` starts them: a minute back, not at 1970 (a sweep from there walks
    # every minute bucket since).
    await store.advance_cursors({s: Cursor(second_of(T0) - 60, 0) for s in range(SHARDS)})
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["held", "free"], 600_000)
    await queue.start()
    await consumer.start()
    try:
        await holds.set_control(QueueControl("held", paused=True, paused_ms=T0))
        d = Dispatcher(store, queue, SingleOwner(SHARDS, 1), ManualClock(T0), settings=SETTINGS,
                       holds=holds)  # fmt: skip
        free, fire_s = await fire_all(d, consumer, T0 + 5_000)
        began = time.perf_counter()
        parked = await fire_all(d, consumer, T0 + 100_000, T0 + 110_000 + SIZE)
        assert parked == ([], 0.0)  # parked, not sent
        park_s = time.perf_counter() - began
        assert await holds.count_parked("held", SIZE + 1) == SIZE
        await holds.set_control(QueueControl("held"))
        released, release_s = await fire_all(d, consumer, T0 + 200_000)
    finally:
        await consumer.close()
        await queue.close()
    assert sorted(free) == sorted(t.task_id for t in made if t.queue == "free")
    assert released == [t.task_id for t in made if t.queue == "held"]  # once each, due order
    assert await holds.count_parked("held", 10) == 0
    print(f"\n{type(store).__name__}, {SIZE:,} tasks: fired {SIZE / fire_s:,.0f}/s unpaused;"
          f" parked in {park_s:.1f} s (with the ticks); released {SIZE / release_s:,.0f}/s"
          f" ({fire_s / release_s:.2f} of firing)")  # fmt: skip
