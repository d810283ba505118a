"""The ScheduleStore contract (tikk.store.schedules), run against every backend."""

from __future__ import annotations

import pytest

from tests.contract.conftest import ScheduleBackend
from tests.factories import T0, make_schedule
from tikk.buckets import second_of
from tikk.errors import AlreadyExists, Conflict, NotFound
from tikk.model import DueEntry, TaskState
from tikk.schedules.model import CatchUp, Overlap, SchedulePolicy
from tikk.store.schedules import StepWrite

START = (second_of(T0) - 120, "")


async def ticks(b: ScheduleBackend, shard: int, until_ms: int = T0 + 3_600_000) -> list[DueEntry]:
    rows = await b.tasks.read_due(shard, START, second_of(until_ms), 10_000)
    return [r for r in rows if r.is_tick]


async def test_create_round_trips_and_writes_the_tick(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    policy = SchedulePolicy(catch_up=CatchUp.RUN_ALL, overlap=Overlap.BUFFER_ONE)
    s = make_schedule("s1", cron="*/5 * * * *", policy=policy, payload=b"\x00\xff")
    stored, created = await b.schedules.create(s)
    assert created and stored == s.evolve(version=1)
    assert await b.schedules.get("default", "s1") == stored
    [tick] = await ticks(b, s.shard)
    assert (tick.schedule_id, tick.scheduled_ms, tick.due_ms) == ("s1", T0 + 40_000, T0 + 40_000)
    assert tick.task_id == "s1@schedule" and tick.attempt == 0


async def test_create_is_idempotent_and_refuses_other_content(
    schedule_backend: ScheduleBackend,
) -> None:
    b = schedule_backend
    await b.schedules.create(make_schedule("s1"))
    again, created = await b.schedules.create(make_schedule("s1"))
    assert not created and again.version == 1
    with pytest.raises(AlreadyExists):
        await b.schedules.create(make_schedule("s1", payload=b"other"))


async def test_get_missing_is_not_found(schedule_backend: ScheduleBackend) -> None:
    with pytest.raises(NotFound):
        await schedule_backend.schedules.get("default", "nope")


async def test_list_pages_by_id_within_a_namespace(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    for sid in ["c", "a", "e", "b", "d"]:
        await b.schedules.create(make_schedule(sid))
    await b.schedules.create(make_schedule("x", namespace="other"))
    seen: list[str] = []
    token = ""
    while True:
        page = await b.schedules.list("default", 2, token)
        assert len(page.items) <= 2
        seen += [s.schedule_id for s in page.items]
        token = page.next_token
        if not token:
            break
    assert seen == ["a", "b", "c", "d", "e"]


async def test_replace_checks_the_version(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    stored, _ = await b.schedules.create(make_schedule("s1"))
    paused = await b.schedules.replace(stored.evolve(paused=True, pause_note="n"), 1)
    assert paused.version == 2 and (await b.schedules.get("default", "s1")).paused
    with pytest.raises(Conflict):
        await b.schedules.replace(stored.evolve(paused=False), 1)
    assert (await b.schedules.get("default", "s1")).pause_note == "n"
    with pytest.raises(NotFound):
        await b.schedules.replace(make_schedule("nope"), 1)


async def test_replace_writes_the_new_tick(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    stored, _ = await b.schedules.create(make_schedule("s1"))
    moved = stored.evolve(next_nominal_ms=T0 + 100_000, next_fire_ms=T0 + 101_000)
    await b.schedules.replace(moved, 1)
    due = {(t.scheduled_ms, t.due_ms) for t in await ticks(b, stored.shard)}
    # The old tick stays behind, stale: it no longer matches the schedule.
    assert (T0 + 100_000, T0 + 101_000) in due


async def test_delete_checks_the_version(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    await b.schedules.create(make_schedule("s1"))
    with pytest.raises(Conflict):
        await b.schedules.delete("default", "s1", 7)
    await b.schedules.delete("default", "s1", 1)
    with pytest.raises(NotFound):
        await b.schedules.get("default", "s1")
    with pytest.raises(NotFound):
        await b.schedules.delete("default", "s1", None)


async def test_step_creates_tasks_and_advances(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    stored, _ = await b.schedules.create(make_schedule("s1"))
    task = stored.occurrence_task(T0 + 40_000, T0 + 40_000, T0 + 40_000)
    nxt = stored.evolve(
        next_nominal_ms=T0 + 100_000, next_fire_ms=T0 + 100_000, runs=1, last_task_id=task.task_id
    )
    assert await b.schedules.step(nxt, 1, [task])
    after = await b.schedules.get("default", "s1")
    assert (after.version, after.runs, after.next_nominal_ms) == (2, 1, T0 + 100_000)
    got = await b.tasks.get("default", "s1@" + str(T0 + 40_000))
    assert got.schedule_id == "s1" and got.state is TaskState.SCHEDULED
    assert got.idempotency_key == f"default/s1@{T0 + 40_000}"
    due = {t.scheduled_ms for t in await ticks(b, stored.shard)}
    assert T0 + 100_000 in due


async def test_step_on_a_stale_version_changes_nothing_stored(
    schedule_backend: ScheduleBackend,
) -> None:
    b = schedule_backend
    stored, _ = await b.schedules.create(make_schedule("s1"))
    await b.schedules.replace(stored.evolve(paused=True), 1)
    assert not await b.schedules.step(stored.evolve(runs=5), 1, [])
    after = await b.schedules.get("default", "s1")
    assert (after.version, after.runs, after.paused) == (2, 0, True)
    await b.schedules.delete("default", "s1", None)
    assert not await b.schedules.step(stored.evolve(runs=5), 2, [])


async def test_step_leaves_an_existing_task_alone(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    stored, _ = await b.schedules.create(make_schedule("s1"))
    task = stored.occurrence_task(T0 + 40_000, T0 + 40_000, T0 + 40_000)
    await b.tasks.create(task)
    [marked] = (await b.tasks.mark_dispatched([task.entry()], T0 + 40_000)).entries
    assert marked.task_id == task.task_id
    assert await b.schedules.step(stored.evolve(runs=1), 1, [task])
    assert (await b.tasks.get("default", task.task_id)).state is TaskState.DISPATCHED


async def test_a_finished_schedule_has_no_tick(schedule_backend: ScheduleBackend) -> None:
    b = schedule_backend
    s = make_schedule("s1", next_nominal_ms=None)
    await b.schedules.create(s)
    assert await ticks(b, s.shard) == []


async def test_bulk_get_and_step_report_each_outcome_in_order(
    schedule_backend: ScheduleBackend,
) -> None:
    b = schedule_backend
    a, _ = await b.schedules.create(make_schedule("a"))
    c, _ = await b.schedules.create(make_schedule("c"))
    await b.schedules.replace(c.evolve(paused=True), 1)  # c moves to version 2
    found = await b.schedules.get_many([("default", "a"), ("default", "nope"), ("default", "c")])
    assert [s.schedule_id if s else None for s in found] == ["a", None, "c"]
    task = a.occurrence_task(T0 + 40_000, T0 + 40_000, T0 + 40_000)
    done = await b.schedules.step_many(
        [StepWrite(a.evolve(runs=1), 1, [task]), StepWrite(c.evolve(runs=1), 1, [])]
    )
    assert list(done) == [True, False]
    assert (await b.schedules.get("default", "a")).runs == 1
    assert (await b.schedules.get("default", "c")).runs == 0
    assert (await b.tasks.get("default", task.task_id)).schedule_id == "a"
