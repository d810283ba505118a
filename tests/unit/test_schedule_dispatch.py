"""Schedules through the dispatcher, tick by tick, with a manual clock: the embedded store,
schedule store, run history and queue, and the same stepper the dispatcher process runs."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from dispatcher.schedule_steps import ScheduleStepper
from history.sqlite import SqliteRunHistory
from tests.factories import T0, make_schedule
from tikk.clock import ManualClock
from tikk.model import Succeed
from tikk.schedules.model import (
    CatchUp,
    OccurrenceQuery,
    Outcome,
    Overlap,
    Schedule,
    SchedulePolicy,
)
from tikk.schedules.spec import next_occurrence, preview
from tikk.settings import DispatchSettings
from tikk.store.sqlite.schedules import SqliteScheduleStore
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 4
SETTINGS = DispatchSettings(cursor_flush_interval_ms=0)
FIRST = T0 + 40_000


@dataclass
class Rig:
    store: SqliteTaskStore
    schedules: SqliteScheduleStore
    history: SqliteRunHistory
    consumer: LocalQueueConsumer
    queue: LocalReadyQueue
    clock: ManualClock

    def dispatcher(self, epoch: int = 1) -> Dispatcher:
        stepper = ScheduleStepper(self.schedules, self.store, self.history, self.clock)
        owner = SingleOwner(SHARDS, epoch)
        return Dispatcher(
            self.store, self.queue, owner, self.clock, settings=SETTINGS, schedules=stepper
        )

    async def create(self, schedule: Schedule) -> Schedule:
        stored, _ = await self.schedules.create(replace(schedule, shard=schedule.shard % SHARDS))
        return stored

    async def run(self, d: Dispatcher, until_ms: int, step_ms: int = 100) -> None:
        while self.clock.now_ms() < until_ms:
            self.clock.advance(step_ms)
            await d.tick(self.clock.now_ms())

    async def published(self) -> list[tuple[str, int, int, str]]:
        """(task id, scheduled ms, fired ms, idempotency key) of each delivery, in order."""
        msgs = await self.consumer.fetch(100_000)
        for m in msgs:
            await self.consumer.commit(m)
        return [
            (d.task_id, d.scheduled_time.ToMilliseconds(), d.fired_time.ToMilliseconds(),
             d.idempotency_key)
            for d in (m.delivery for m in msgs)
        ]  # fmt: skip

    async def outcomes(self, schedule_id: str) -> Counter[Outcome]:
        query = OccurrenceQuery("default", schedule_id, 0, 2**62)
        found: Counter[Outcome] = Counter()
        token = ""
        while True:
            page = await self.history.list_occurrences(query, 1_000, token)
            found.update(r.outcome for r in page.items)
            if not (token := page.next_token):
                return found


@contextlib.asynccontextmanager
async def _rig(tmp_path: Path) -> AsyncIterator[Rig]:
    db = str(tmp_path / "tikk.db")
    rig = Rig(
        SqliteTaskStore(db, SHARDS),
        SqliteScheduleStore(db),
        SqliteRunHistory(str(tmp_path / "history.db")),
        LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000),
        LocalReadyQueue(str(tmp_path / "queue.db")),
        ManualClock(T0),
    )
    await rig.store.start()
    await rig.schedules.start()
    await rig.history.start()
    try:
        await rig.queue.start()
        await rig.consumer.start()
        yield rig
    finally:
        for part in (rig.consumer, rig.queue, rig.schedules, rig.store, rig.history):
            await part.close()


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    async with _rig(tmp_path) as r:
        yield r


async def test_every_second_fires_once_per_second_without_drift(rig: Rig) -> None:
    await rig.create(make_schedule("tick", interval_ms=1_000, next_nominal_ms=T0 + 1_000))
    d = rig.dispatcher()
    await rig.run(d, T0 + 300_500)
    got = await rig.published()
    nominal = [s for _, s, _, _ in got]
    assert nominal == [T0 + k * 1_000 for k in range(1, 301)]  # 5 minutes, none twice
    assert len({key for *_, key in got}) == 300
    # Never early, and no drift: each at most one tick (100 ms) after its instant.
    assert all(0 <= fired - sched <= 100 for _, sched, fired, _ in got)
    assert got[0][3] == f"default/tick@{T0 + 1_000}" and got[0][0] == f"tick@{T0 + 1_000}"
    assert (await rig.outcomes("tick")) == Counter({Outcome.FIRED: 300})


async def test_a_dispatcher_down_past_the_window_applies_the_catch_up_policy(rig: Rig) -> None:
    await rig.create(make_schedule("m"))  # every minute, first at FIRST
    d = rig.dispatcher()
    # Long enough for the cursor to pass the first run (a restart re-sends what it has not).
    await rig.run(d, FIRST + 7_000)
    assert [s for _, s, _, _ in await rig.published()] == [FIRST]
    # Down for ten minutes; a new dispatcher (a restart) takes over 10 min 7.1 s later.
    rig.clock.advance(10 * 60_000)
    await rig.run(rig.dispatcher(epoch=2), rig.clock.now_ms() + 1_000)
    # RUN_ONCE (default): the occurrence 7.1 s late runs; nine more than 60 s late are missed.
    late = [s for _, s, _, _ in await rig.published()]
    assert late == [FIRST + 10 * 60_000]
    assert (await rig.outcomes("m")) == Counter({Outcome.FIRED: 2, Outcome.MISSED: 9})
    stored = await rig.schedules.get("default", "m")
    assert stored.next_nominal_ms == FIRST + 11 * 60_000 and stored.runs == 2


async def test_pause_skips_and_resume_continues(rig: Rig) -> None:
    s = await rig.create(make_schedule("p", interval_ms=1_000, next_nominal_ms=T0 + 1_000))
    d = rig.dispatcher()
    await rig.run(d, T0 + 3_500)
    current = await rig.schedules.get("default", "p")
    await rig.schedules.replace(current.evolve(paused=True, pause_note="deploy"), current.version)
    await rig.run(d, T0 + 8_500)
    current = await rig.schedules.get("default", "p")
    await rig.schedules.replace(current.evolve(paused=False), current.version)
    await rig.run(d, T0 + 10_500)
    fired = [sched for _, sched, _, _ in await rig.published()]
    assert fired == [T0 + k * 1_000 for k in (1, 2, 3, 9, 10)]
    assert (await rig.outcomes(s.schedule_id)) == Counter(
        {Outcome.FIRED: 5, Outcome.SKIPPED_PAUSED: 5}
    )


async def test_overlap_skip_skips_while_the_previous_occurrence_runs(rig: Rig) -> None:
    policy = SchedulePolicy(overlap=Overlap.SKIP)
    await rig.create(make_schedule("o", interval_ms=1_000, next_nominal_ms=T0 + 1_000,
                                   policy=policy))  # fmt: skip
    d = rig.dispatcher()
    # Nothing finishes the first run (no worker): the next four are skipped.
    await rig.run(d, T0 + 5_500)
    assert [s for _, s, _, _ in await rig.published()] == [T0 + 1_000]
    first = await rig.store.get("default", f"o@{T0 + 1_000}")
    await rig.store.finish_attempt("default", first.task_id, 1, Succeed(), rig.clock.now_ms())
    await rig.run(d, T0 + 6_500)
    assert [s for _, s, _, _ in await rig.published()] == [T0 + 6_000]
    assert (await rig.outcomes("o")) == Counter({Outcome.FIRED: 2, Outcome.SKIPPED_OVERLAP: 4})


async def test_overlap_cancel_previous_cancels_the_running_occurrence(rig: Rig) -> None:
    policy = SchedulePolicy(overlap=Overlap.CANCEL_PREVIOUS)
    await rig.create(make_schedule("c", interval_ms=1_000, next_nominal_ms=T0 + 1_000,
                                   policy=policy))  # fmt: skip
    await rig.run(rig.dispatcher(), T0 + 2_500)
    assert [s for _, s, _, _ in await rig.published()] == [T0 + 1_000, T0 + 2_000]
    cancelled = await rig.store.get("default", f"c@{T0 + 1_000}")
    assert cancelled.state.name == "CANCELLED"
    # The cancelled run's late report changes nothing.
    late = await rig.store.finish_attempt(
        "default", cancelled.task_id, 1, Succeed(), rig.clock.now_ms()
    )
    assert late is None


async def test_update_while_running_moves_the_chain_without_repeats(rig: Rig) -> None:
    await rig.create(make_schedule("u", interval_ms=1_000, next_nominal_ms=T0 + 1_000))
    d = rig.dispatcher()
    await rig.run(d, T0 + 3_500)
    current = await rig.schedules.get("default", "u")
    spec = replace(current.spec, interval_ms=2_000)
    # What UpdateSchedule does: new spec, chain restarts from the next instant after now.
    moved = current.evolve(spec=spec, next_nominal_ms=T0 + 4_000, next_fire_ms=T0 + 4_000)
    await rig.schedules.replace(moved, current.version)
    await rig.run(d, T0 + 10_500)
    fired = [s for _, s, _, _ in await rig.published()]
    assert fired == [T0 + k * 1_000 for k in (1, 2, 3, 4, 6, 8, 10)]
    assert len(set(fired)) == len(fired)


async def test_a_deleted_schedule_stops_firing(rig: Rig) -> None:
    await rig.create(make_schedule("d", interval_ms=1_000, next_nominal_ms=T0 + 1_000))
    d = rig.dispatcher()
    await rig.run(d, T0 + 2_500)
    await rig.schedules.delete("default", "d", None)
    await rig.run(d, T0 + 6_500)
    assert [s for _, s, _, _ in await rig.published()] == [T0 + 1_000, T0 + 2_000]


@pytest.mark.timeout(300)  # six hours of dispatcher ticks, every 500 ms
async def test_preview_equals_what_fires_across_a_dst_change(rig: Rig) -> None:
    # Europe/Oslo, 25 October 2026: 03:00 CEST becomes 02:00 CET at 01:00 UTC.
    start = 1_792_879_200_000  # 2026-10-24T22:00:00Z = 00:00 CEST
    s = make_schedule("dst", cron="*/20 * * * *")
    spec = replace(s.spec, timezone="Europe/Oslo", jitter_ms=30_000)
    s = s.evolve(spec=spec).with_next(next_occurrence(spec, start, schedule_id="dst"))
    expected = preview(spec, after_ms=start, schedule_id="dst", until_ms=start + 6 * 3_600_000)
    rig.clock.set(start)
    await rig.create(s)
    await rig.run(rig.dispatcher(), start + 6 * 3_600_000 + 31_000, step_ms=500)
    got = await rig.published()
    assert [sched for _, sched, _, _ in got] == [o.nominal_ms for o in expected]
    # Each occurrence went out at its jittered instant, never before it.
    assert all(
        0 <= fired - o.fire_ms <= 500 for (_, _, fired, _), o in zip(got, expected, strict=True)
    )
    # The repeated 02:00-02:59 CET hour does not fire again.
    assert len(expected) == 3 * 6 - 3


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    window_s=st.integers(0, 30),
    catch_up=st.sampled_from(list(CatchUp)),
    steps=st.lists(st.integers(100, 20_000), min_size=5, max_size=25),
)
async def test_every_occurrence_is_decided_once_whatever_the_tick_timing(
    tmp_path_factory: pytest.TempPathFactory, window_s: int, catch_up: CatchUp, steps: list[int]
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    async with _rig(tmp) as rig:
        policy = SchedulePolicy(catch_up_window_ms=window_s * 1_000, catch_up=catch_up)
        await rig.create(make_schedule("p", interval_ms=1_000, next_nominal_ms=T0 + 1_000,
                                       policy=policy))  # fmt: skip
        d = rig.dispatcher()
        for step in steps:
            rig.clock.advance(step)
            await d.tick(rig.clock.now_ms())
        now = rig.clock.now_ms()
        query = OccurrenceQuery("default", "p", 0, 2**62)
        records = (await rig.history.list_occurrences(query, 10_000, "")).items
        decided = sorted(r.nominal_ms for r in records)
        # Every occurrence due by the last tick was decided exactly once, in one chain.
        assert decided == list(range(T0 + 1_000, now - now % 1_000 + 1, 1_000))
        fired = [sched for _, sched, fired_ms, _ in await rig.published() if fired_ms >= sched]
        assert len(fired) == sum(r.outcome is Outcome.FIRED for r in records)


async def test_an_outage_longer_than_one_slice_is_decided_in_full(rig: Rig) -> None:
    policy = SchedulePolicy(catch_up=CatchUp.RUN_ALL, catch_up_max_runs=3)
    await rig.create(make_schedule("long", interval_ms=1_000, next_nominal_ms=T0 + 1_000,
                                   policy=policy))  # fmt: skip
    # Down 3 hours: 10,800 due occurrences, more than one step decides (MAX_PER_STEP).
    rig.clock.advance(3 * 3_600_000)
    await rig.run(rig.dispatcher(), rig.clock.now_ms() + 1_000, step_ms=100)
    outcomes = await rig.outcomes("long")
    total = 3 * 3_600 + 1
    assert sum(outcomes.values()) == total
    # 61 within the 60 s window at the first tick, the 3 latest before them, and the
    # occurrence that came due during the last second.
    fired = [s for _, s, _, _ in await rig.published()]
    assert outcomes[Outcome.FIRED] == len(fired) == len(set(fired))
    assert fired == sorted(fired) and fired[-1] == T0 + total * 1_000


async def test_many_schedules_due_at_once_go_out_in_slices(rig: Rig) -> None:
    for k in range(1_200):
        await rig.create(make_schedule(f"herd-{k}", next_nominal_ms=FIRST))
    d = rig.dispatcher()
    rig.clock.set(FIRST)
    await d.tick(FIRST)
    # The first slice is out after one pass; the rest follow on the next passes.
    assert len(await rig.published()) == SETTINGS.max_steps
    await rig.run(d, FIRST + 500)
    assert len(await rig.published()) == 1_200 - SETTINGS.max_steps
    stored = await rig.schedules.get("default", "herd-7")
    assert stored.next_nominal_ms == FIRST + 60_000
