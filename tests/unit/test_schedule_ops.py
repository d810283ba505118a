"""The schedule operations below the API, on domain objects: the embedded stores and a manual
clock, no gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from history.sqlite import SqliteRunHistory
from server.ops.quotas import QuotaGate
from server.ops.schedules import ScheduleOps
from tests.factories import T0, make_schedule
from tikk.clock import ManualClock
from tikk.errors import Conflict
from tikk.schedules.spec import ScheduleSpec
from tikk.settings import Limits, QuotaSettings
from tikk.store.sqlite.quotas import SqliteQuotaStore
from tikk.store.sqlite.schedules import SqliteScheduleStore
from tikk.store.sqlite.tasks import SqliteTaskStore

SHARDS = 4


@pytest.fixture
async def ops(tmp_path: Path) -> AsyncIterator[ScheduleOps]:
    db = str(tmp_path / "tikk.db")
    parts = (
        SqliteScheduleStore(db),
        SqliteTaskStore(db, SHARDS),
        SqliteRunHistory(str(tmp_path / "history.db")),
        LocalReadyQueue(str(tmp_path / "queue.db")),
        SqliteQuotaStore(db),
    )
    schedules, store, history, queue, quota_store = parts
    for part in parts:
        await part.start()
    clock = ManualClock(T0)
    quotas = QuotaGate(quota_store, schedules, clock, QuotaSettings())
    yield ScheduleOps(schedules, store, history, clock, Limits(), queue=queue, quotas=quotas)
    for part in parts:
        await part.close()


async def test_update_keeps_the_pending_occurrence_while_the_spec_stays(ops: ScheduleOps) -> None:
    s = await ops.create(make_schedule("s", shard_count=SHARDS))
    action = replace(s.action, handler="h2")
    updated = await ops.update(
        "default", "s", spec=s.spec, action=action, policy=s.policy, expected_revision=1
    )
    assert (updated.action.handler, updated.revision) == ("h2", 2)
    assert updated.next_nominal_ms == s.next_nominal_ms
    assert updated.fingerprint != s.fingerprint


async def test_update_with_a_new_spec_starts_its_chain_from_now(ops: ScheduleOps) -> None:
    s = await ops.create(make_schedule("s", shard_count=SHARDS, next_nominal_ms=T0 + 40_000))
    every_hour = ScheduleSpec(interval_ms=3_600_000)
    updated = await ops.update("default", "s", spec=every_hour, action=s.action, policy=s.policy)
    assert updated.spec == every_hour
    assert updated.next_nominal_ms == (T0 // 3_600_000 + 1) * 3_600_000


async def test_update_from_a_stale_revision_is_a_conflict_and_changes_nothing(
    ops: ScheduleOps,
) -> None:
    s = await ops.create(make_schedule("s", shard_count=SHARDS))
    await ops.pause("default", "s", "deploy")
    with pytest.raises(Conflict, match="at version 2, not 1"):
        await ops.update(
            "default", "s", spec=s.spec, action=replace(s.action, handler="h2"),
            policy=s.policy, expected_revision=1,
        )  # fmt: skip
    assert (await ops.get("default", "s")).action.handler == "h"


async def test_pause_and_resume(ops: ScheduleOps) -> None:
    await ops.create(make_schedule("s", shard_count=SHARDS))
    paused = await ops.pause("default", "s", "deploy")
    assert (paused.paused, paused.pause_note, paused.revision) == (True, "deploy", 2)
    resumed = await ops.resume("default", "s")
    assert (resumed.paused, resumed.pause_note, resumed.revision) == (False, "", 3)


async def test_upcoming_starts_at_the_pending_occurrence_and_stops_at_max_runs(
    ops: ScheduleOps,
) -> None:
    s = make_schedule("s", shard_count=SHARDS, interval_ms=60_000, next_nominal_ms=T0 - 20_000)
    await ops.create(s.evolve(spec=replace(s.spec, max_runs=3), runs=1))
    spec, found = await ops.upcoming("default", "s", after_ms=None, count=10, until_ms=None)
    assert spec.max_runs == 3
    # Overdue now, still the first shown; no more than the two runs left.
    assert [o.nominal_ms for o in found] == [T0 - 20_000, T0 + 40_000]
    await ops.create(make_schedule("done", shard_count=SHARDS, next_nominal_ms=None))
    _, none = await ops.upcoming("default", "done", after_ms=None, count=10, until_ms=None)
    assert none == []


async def test_trigger_creates_a_task_of_the_schedule_now(ops: ScheduleOps) -> None:
    await ops.create(make_schedule("s", shard_count=SHARDS))
    task = await ops.trigger("default", "s")
    assert (task.schedule_id, task.task_id, task.due_ms) == ("s", f"s@{T0}", T0)
