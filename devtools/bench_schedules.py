"""``python -m devtools bench-schedules``: N schedules that all fire at the same instant (the
"every job at 09:00" case), stepped by one dispatcher in this process; reports how fast the
schedules were stored and how late their occurrences reached the ready queue.

The store and history are those configured (SQLite or Cassandra); the queue is the embedded
one, read back here to measure. A measurement, not a test: nothing here asserts.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from dispatcher.schedule_steps import ScheduleStepper
from server.wiring import Drivers, open_history, open_schedules, open_store
from tikk.buckets import shard_of
from tikk.clock import SystemClock
from tikk.delivery_tokens import new_keys
from tikk.model import fingerprint
from tikk.schedules.model import Schedule, ScheduleAction, SchedulePolicy
from tikk.schedules.spec import ScheduleSpec
from tikk.settings import Settings
from worker_sdk.queues.local import LocalQueueConsumer

_HOUR_MS = 3_600_000
_WINDOW = 256


@dataclass(frozen=True)
class ScheduleBenchResult:
    schedules: int
    create_per_s: float
    published: int
    # Nominal instant → the dispatcher handed the occurrence to the queue, in ms.
    p50_ms: int
    p99_ms: int
    max_ms: int


def _schedule(i: int, fire_ms: int, shards: int) -> Schedule:
    sid = f"bench-{i}"
    spec = ScheduleSpec(interval_ms=_HOUR_MS, phase_ms=fire_ms % _HOUR_MS)
    return Schedule(
        namespace="bench", schedule_id=sid, spec=spec,
        action=ScheduleAction(queue="bench", handler="h"), policy=SchedulePolicy(),
        shard=shard_of("bench", sid, shards), created_ms=fire_ms, updated_ms=fire_ms,
        fingerprint=fingerprint("bench", sid, fire_ms), next_nominal_ms=fire_ms,
        next_fire_ms=fire_ms,
    )  # fmt: skip


async def run(settings: Settings, count: int, lead_s: float) -> ScheduleBenchResult:
    """Create ``count`` schedules firing ``lead_s`` from now, then dispatch them."""
    clock = SystemClock()
    fire_ms = (clock.now_ms() // 1000 + int(lead_s)) * 1000
    drivers = Drivers()
    store = await open_store(settings, drivers)
    schedules = await open_schedules(settings, drivers)
    history = await open_history(settings, drivers)
    with tempfile.TemporaryDirectory() as tmp:
        queue_path = str(Path(tmp) / "queue.db")
        queue, consumer = (
            LocalReadyQueue(queue_path),
            LocalQueueConsumer(queue_path, ["bench"], 600_000),
        )
        try:
            await queue.start()
            await consumer.start()
            started = time.perf_counter()
            for i in range(0, count, _WINDOW):
                batch = range(i, min(i + _WINDOW, count))
                await asyncio.gather(
                    *(schedules.create(_schedule(k, fire_ms, store.shard_count)) for k in batch)
                )
            create_per_s = count / (time.perf_counter() - started)
            if clock.now_ms() > fire_ms:
                print("bench-schedules: creating took longer than the lead; raise --lead")
            stepper = ScheduleStepper(schedules, store, history, clock)
            owner = SingleOwner(store.shard_count, clock.now_ms())
            # Signed as in production, so the figure includes the token's cost.
            dispatcher = Dispatcher(store, queue, owner, clock, schedules=stepper, keys=new_keys())
            lateness = await _dispatch_all(dispatcher, consumer, count, fire_ms)
        finally:
            for part in (consumer, queue, schedules, store, history):
                await part.close()
    lateness.sort()
    n = len(lateness)
    return ScheduleBenchResult(
        count, create_per_s, n, lateness[n // 2] if n else -1,
        lateness[min(n - 1, int(n * 0.99))] if n else -1, lateness[-1] if n else -1,
    )  # fmt: skip


async def _dispatch_all(
    dispatcher: Dispatcher, consumer: LocalQueueConsumer, count: int, fire_ms: int
) -> list[int]:
    stop = asyncio.Event()
    running = asyncio.create_task(dispatcher.run(stop))
    lateness: list[int] = []
    deadline = time.monotonic() + 600
    try:
        while len(lateness) < count and time.monotonic() < deadline:
            for m in await consumer.fetch(5_000):
                d = m.delivery
                lateness.append(d.fired_time.ToMilliseconds() - d.scheduled_time.ToMilliseconds())
                await consumer.commit(m)
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await running
    return lateness


def print_result(r: ScheduleBenchResult) -> None:
    print(
        f"{r.schedules} schedules: created {r.create_per_s:,.0f}/s; {r.published} occurrences "
        f"published; nominal → queue p50 {r.p50_ms} ms, p99 {r.p99_ms} ms, max {r.max_ms} ms"
    )
