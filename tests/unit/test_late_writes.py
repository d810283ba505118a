"""No late write is lost: a property over tick timings, write delays, takeovers and restarts.

A due-index row can land after the second it belongs to has been scanned: a task created
"due now", a writer whose clock lags, a slow write. The dispatcher promises that a row whose
write completes less than ``late_write_grace_s`` after its due time is fired, whatever the
tick timing, a takeover by a new owner (the old one killed, or still running and fenced) or a
stop and start. This checks it on the real embedded store and queue with a manual clock.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from tests.factories import T0, make_task
from tikk.clock import ManualClock
from tikk.settings import DispatchSettings
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 2
GRACE_S = 5
SETTINGS = DispatchSettings(late_write_grace_s=GRACE_S, rescan_interval_ms=250, lead_ms=0)
DRAIN_MS = 20_000


@dataclass(frozen=True)
class Write:
    """A task due at ``due_ms`` whose rows become visible at ``at_ms``."""

    name: str
    due_ms: int
    at_ms: int


@dataclass(frozen=True)
class TickGap:
    """Time passes by ``gap_ms``, then ``event`` happens: ``tick`` (the owner ticks),
    ``kill`` (the owner dies without a word and a new owner takes over), ``restart`` (the
    owner stops cleanly and a new one starts), ``zombie`` (a killed owner wakes up and ticks
    once more, then dies for good)."""

    gap_ms: int
    event: str


writes_st = st.lists(
    st.tuples(st.integers(0, 30_000), st.integers(-4_000, GRACE_S * 1000 - 1)),
    min_size=1,
    max_size=20,
).map(
    lambda pairs: [
        Write(f"w{i}", T0 + due, max(T0, T0 + due + late)) for i, (due, late) in enumerate(pairs)
    ]
)
steps_st = st.lists(
    st.builds(
        TickGap,
        gap_ms=st.one_of(st.integers(1, 1_600), st.integers(1_600, 12_000)),
        event=st.sampled_from(["tick"] * 8 + ["kill", "restart", "zombie"]),
    ),
    min_size=1,
    max_size=40,
)


@contextmanager
def workspace() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


class Run:
    """The store, queue and a chain of dispatchers over one manual clock."""

    def __init__(self, tmp: Path) -> None:
        self.clock = ManualClock(T0)
        self.store = SqliteTaskStore(str(tmp / "tikk.db"), SHARDS)
        self.queue = LocalReadyQueue(str(tmp / "queue.db"))
        self.consumer = LocalQueueConsumer(str(tmp / "queue.db"), ["q"], 3_600_000)
        self.epoch = 1
        self.owner = self._dispatcher()
        self.zombie: Dispatcher | None = None
        self.fired: dict[str, list[int]] = {}

    def _dispatcher(self) -> Dispatcher:
        owner = SingleOwner(SHARDS, self.epoch)
        return Dispatcher(self.store, self.queue, owner, self.clock, settings=SETTINGS)

    async def at(self, now: int, event: str) -> None:
        self.clock.set(now)
        if event == "kill":
            self.zombie, self.epoch = self.owner, self.epoch + 1
            self.owner = self._dispatcher()
        elif event == "restart":
            await self.owner.close(now)
            self.epoch += 1
            self.owner = self._dispatcher()
        elif event == "zombie" and self.zombie is not None:
            await self.zombie.tick(now)
            self.zombie = None
        await self.owner.tick(now)
        await self._collect()

    async def start(self) -> None:
        await self.store.start()
        await self.queue.start()
        await self.consumer.start()

    async def _collect(self) -> None:
        for m in await self.consumer.fetch(10_000):
            await self.consumer.commit(m)
            fired = m.delivery.fired_time.ToMilliseconds()
            self.fired.setdefault(m.delivery.task_id, []).append(fired)

    async def close(self) -> None:
        await self.consumer.close()
        await self.queue.close()
        await self.store.close()


async def play(tmp: Path, writes: list[Write], steps: list[TickGap]) -> Run:
    run = Run(tmp)
    await run.start()
    pending = sorted(writes, key=lambda w: w.at_ms)
    now = T0
    schedule = [(s.gap_ms, s.event) for s in steps]
    end = max(*(w.at_ms for w in writes), *(w.due_ms for w in writes)) + DRAIN_MS
    while schedule or now < end:
        gap, event = schedule.pop(0) if schedule else (250, "tick")
        now += gap
        while pending and pending[0].at_ms <= now:
            w = pending.pop(0)
            task = make_task(w.name, due_ms=w.due_ms, shard_count=SHARDS, created_ms=w.at_ms)
            await run.store.create(task)
        await run.at(now, event)
    return run


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(writes=writes_st, steps=steps_st)
async def test_every_row_written_within_the_grace_period_fires(
    writes: list[Write], steps: list[TickGap]
) -> None:
    with workspace() as tmp:
        run = await play(tmp, writes, steps)
        try:
            missing = [w for w in writes if w.name not in run.fired]
            assert missing == [], f"never fired: {missing}"
            early = [(w.name, f) for w in writes for f in run.fired[w.name] if f < w.due_ms]
            assert early == []
        finally:
            await run.close()


async def test_a_row_written_three_seconds_late_fires_whatever_the_tick_phase() -> None:
    """The case a fault run found: 3 s late, ticks 1.2 s apart, at every phase."""
    for phase in range(0, 1_200, 100):
        with workspace() as tmp:
            due = T0 + 10_000
            write = Write("late", due, due + 3_000)
            steps = [TickGap(phase + 1, "tick")] + [TickGap(1_200, "tick")] * 30
            run = await play(tmp, [write], steps)
            try:
                assert "late" in run.fired, f"lost at tick phase {phase} ms"
            finally:
                await run.close()
