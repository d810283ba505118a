"""Dispatchers handing shards over while tasks are created, retried and held by a paused queue,
on the embedded store and queue with a manual clock: a seeded random walk through kills,
restarts, rebalances, owners that act a step after they lost a shard, late creates and
pauses, after which every task must still have gone out at its last attempt.

Each step does what the processes of a cluster do between two of their reads: the server
creates (through the late-write guard, as ``TaskOps`` does) and records retries; ownership
moves as ZooKeeper moves it (released first, taken at a newer epoch); each live dispatcher
ticks, in a random order. A killed dispatcher's shards stay without an owner for a session
timeout. Steps are whole ticks, so this finds what goes wrong between processes, not between
the read and fire loops of one (``test_queue_gates`` holds those interleavings). More seeds by
hand: ``TIKK_HANDOVER_SEEDS=200 pytest`` on this file.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from server.ops.late_writes import LateWriteGuard
from tests.factories import T0, make_task
from tikk.clock import ManualClock
from tikk.errors import TikkError
from tikk.model import RetryAt, Task, TaskState
from tikk.queue_holds import QueueControl
from tikk.settings import DispatchSettings
from tikk.store.sqlite.queue_holds import SqliteQueueHoldStore
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 6
GRACE_S = 3
SESSION_MS = 4_000
SETTINGS = DispatchSettings(
    prefetch_ms=2_000,
    late_write_grace_s=GRACE_S,
    cursor_flush_interval_ms=0,
    queue_control_refresh_ms=0,
    release_per_s=200,
    lead_ms=0,
)
SEEDS = int(os.environ.get("TIKK_HANDOVER_SEEDS", "8"))


class Owner:
    """What ``owned()`` tells one dispatcher; ``lagging`` keeps the view of the step before,
    as a process that has not yet seen a change acts on what it knew."""

    def __init__(self) -> None:
        self.shards: dict[int, int] = {}
        self.seen: dict[int, int] = {}
        self.lagging = False

    def owned(self) -> Mapping[int, int]:
        if not self.lagging:
            self.seen = dict(self.shards)
        return self.seen

    async def ping(self) -> None:
        return None

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass
class Member:
    dispatcher: Dispatcher
    owner: Owner


@dataclass
class World:
    rng: random.Random
    store: SqliteTaskStore
    holds: SqliteQueueHoldStore
    queue: LocalReadyQueue
    consumer: LocalQueueConsumer
    clock: ManualClock
    guard: LateWriteGuard
    members: list[Member] = field(default_factory=list)
    # Shard → the instant its dead owner's session ends (no owner until then).
    orphans: dict[int, int] = field(default_factory=dict)
    epoch: int = 0
    created: list[str] = field(default_factory=list)
    # Task id → the attempt it must end at (2 for those failed once).
    last_attempt: dict[str, int] = field(default_factory=dict)
    sent: set[tuple[str, int]] = field(default_factory=set)
    paused: bool = False
    # Creates placed and not yet written: (the instant the write lands, the tasks). A write
    # that takes time is the case the sweep's grace and the guard's re-placing are for.
    in_flight: list[tuple[int, list[Task]]] = field(default_factory=list)

    def join(self) -> None:
        owner = Owner()
        dispatcher = Dispatcher(
            self.store, self.queue, owner, self.clock, settings=SETTINGS, holds=self.holds
        )
        self.members.append(Member(dispatcher, owner))

    def give(self, shard: int, to: Member) -> None:
        """Move ``shard`` to ``to`` at a newer epoch, released by its owner first."""
        for m in self.members:
            m.owner.shards.pop(shard, None)
        self.epoch += 1
        to.owner.shards[shard] = self.epoch

    def kill(self, member: Member) -> None:
        self.members.remove(member)
        for shard in member.owner.shards:
            self.orphans[shard] = self.clock.now_ms() + SESSION_MS

    def rebalance(self) -> None:
        """Orphans whose session ended go to the member with fewest shards; now and then a
        shard moves from the busiest member to the idlest."""
        now = self.clock.now_ms()
        for shard, until in list(self.orphans.items()):
            if until <= now and self.members:
                del self.orphans[shard]
                self.give(shard, min(self.members, key=lambda m: len(m.owner.shards)))
        if len(self.members) > 1 and self.rng.random() < 0.1:
            busiest = max(self.members, key=lambda m: len(m.owner.shards))
            idlest = min(self.members, key=lambda m: len(m.owner.shards))
            if busiest.owner.shards and busiest is not idlest:
                self.give(self.rng.choice(sorted(busiest.owner.shards)), idlest)

    async def create(self, count: int) -> None:
        """Tasks due from a little in the past (a create that arrives late) to seconds ahead,
        written as ``TaskOps`` writes them."""
        now = self.clock.now_ms()
        tasks = []
        for _ in range(count):
            task_id = f"t{len(self.created)}"
            self.created.append(task_id)
            self.last_attempt[task_id] = 1
            due = now + self.rng.randint(-4_000, 9_000)
            tasks.append(make_task(task_id, due_ms=due, shard_count=SHARDS, created_ms=now))
        await self.guard.refresh()
        took = self.rng.choice([0, 0, 100, 300, 1_000, 2_000, 5_000])
        self.in_flight.append((now + took, [self.guard.place(t) for t in tasks]))

    async def land(self) -> None:
        """The creates whose write is done by now, confirmed as ``TaskOps`` confirms them."""
        now = self.clock.now_ms()
        landing = [tasks for at, tasks in self.in_flight if at <= now]
        self.in_flight = [(at, tasks) for at, tasks in self.in_flight if at > now]
        for tasks in landing:
            outcomes = await self.store.create_many(tasks)
            written = [o[0] for o in outcomes if not isinstance(o, TikkError)]
            assert len(written) == len(tasks), outcomes
            await self.guard.confirm(written)

    async def consume(self) -> None:
        """What the queue holds, as workers take it; some first attempts fail once and are
        retried as the result recorder retries them."""
        msgs = await self.consumer.fetch(10_000)
        for m in msgs:
            await self.consumer.commit(m)
            d = m.delivery
            self.sent.add((d.task_id, d.attempt))
            if d.attempt == 1 and self.rng.random() < 0.1:
                await self.fail_once(d.task_id)

    async def fail_once(self, task_id: str) -> None:
        now = self.clock.now_ms()
        task = await self.store.get("default", task_id)
        if task.state is not TaskState.DISPATCHED or task.attempt != 1:
            return
        due = self.guard.place_due(task.shard, now + self.rng.randint(200, 3_000))
        retried = await self.store.finish_attempt(
            "default", task_id, 1, RetryAt(due, "E", "failed once"), now
        )
        if retried is not None:
            self.last_attempt[task_id] = 2
            await self.guard.confirm([retried])

    async def set_paused(self, paused: bool) -> None:
        self.paused = paused
        await self.holds.set_control(QueueControl("q", paused=paused, paused_ms=T0))

    async def step(self) -> None:
        self.clock.set(self.clock.now_ms() + self.rng.randint(20, 400))
        r = self.rng.random()
        if r < 0.03 and len(self.members) > 1:
            self.kill(self.rng.choice(self.members))
        elif r < 0.06 and len(self.members) < 3:
            self.join()
        elif r < 0.09:
            await self.set_paused(not self.paused)
        for m in self.members:
            m.owner.lagging = self.rng.random() < 0.15
        self.rebalance()
        if self.rng.random() < 0.5:
            await self.create(self.rng.randint(1, 8))
        await self.land()
        await self.tick_all()

    async def tick_all(self) -> None:
        for m in self.rng.sample(self.members, len(self.members)):
            await m.dispatcher.tick(self.clock.now_ms())
        await self.consume()

    def missing(self) -> list[str]:
        return [t for t in self.created if (t, self.last_attempt[t]) not in self.sent]


async def _world(tmp: Path, seed: int) -> World:
    store = SqliteTaskStore(str(tmp / "tikk.db"), SHARDS)
    holds = SqliteQueueHoldStore(str(tmp / "tikk.db"))
    queue = LocalReadyQueue(str(tmp / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp / "queue.db"), ["q"], 600_000)
    for part in (store, holds, queue, consumer):
        await part.start()
    clock = ManualClock(T0)
    guard = LateWriteGuard(store, clock, grace_ms=GRACE_S * 1000)
    world = World(random.Random(seed), store, holds, queue, consumer, clock, guard)
    world.join()
    world.join()
    for shard in range(SHARDS):
        world.give(shard, world.members[shard % 2])
    return world


@pytest.mark.parametrize("seed", range(SEEDS))
async def test_every_task_goes_out_through_handovers_kills_and_pauses(
    tmp_path: Path, seed: int
) -> None:
    world = await _world(tmp_path, seed)
    try:
        for _ in range(600):
            await world.step()
        # Calm: the queue resumed, every shard owned, no stale views; then time enough for
        # every retry, parked row and sweep.
        await world.set_paused(False)
        if not world.members:
            world.join()
        for shard in list(world.orphans):
            world.orphans[shard] = 0
        world.rebalance()
        end = world.clock.now_ms() + 30_000
        while world.clock.now_ms() < end:
            world.clock.set(world.clock.now_ms() + 100)
            for m in world.members:
                m.owner.lagging = False
            await world.land()
            await world.tick_all()
        missing = world.missing()
        states = {t: (await world.store.get("default", t)).state.name for t in missing[:5]}
        assert not missing, f"never sent at their last attempt: {len(missing)}, e.g. {states}"
    finally:
        for part in (world.consumer, world.queue, world.holds, world.store):
            await part.close()
