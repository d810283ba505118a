"""The QueueHoldStore contract (tikk.store.queue_holds), run against every backend."""

from __future__ import annotations

from dataclasses import replace

from tests.contract.conftest import SHARDS, HoldBackend
from tests.factories import T0, make_task
from tikk.model import DueEntry, TaskState
from tikk.queue_holds import SKIPPED, QueueControl
from tikk.store.queue_holds import FIRST, parked_position


def entry(task_id: str, due_ms: int, *, queue: str = "email", shard: int = 3) -> DueEntry:
    return DueEntry(
        shard=shard, due_ms=due_ms, namespace="default", task_id=task_id, attempt=1,
        queue=queue, handler="h", payload=b"p", labels={"customer": "acme"}, max_attempts=3,
        scheduled_ms=due_ms, trace_context={"traceparent": "00-x"}, schedule_id="",
        start_timeout_ms=5_000, execution_timeout_ms=30_000,
    )  # fmt: skip


async def test_controls_read_back_whole_and_a_later_write_replaces_one(
    hold_backend: HoldBackend,
) -> None:
    holds = hold_backend.holds
    assert await holds.controls() == {}
    email = QueueControl("email", paused=True, paused_ms=T0, skip_older_than_ms=600_000,
                         updated_ms=T0)  # fmt: skip
    sms = QueueControl("sms", rate_per_s=12.5, updated_ms=T0)
    await holds.set_control(email)
    await holds.set_control(sms)
    assert await holds.controls() == {"email": email, "sms": sms}
    resumed = replace(email, paused=False, updated_ms=T0 + 1)
    await holds.set_control(resumed)
    assert (await holds.controls())["email"] == resumed


async def test_parked_rows_read_back_whole_in_due_order_by_queue_and_shard(
    hold_backend: HoldBackend,
) -> None:
    holds = hold_backend.holds
    rows = [entry(f"t{i}", T0 + (5 - i) * 1_000) for i in range(5)]
    others = [entry("x", T0, queue="sms"), entry("y", T0, shard=4)]
    await holds.park([*rows, *others])
    await holds.park(rows[:2])  # parked again: still once
    in_order = sorted(rows, key=parked_position)
    assert await holds.read_parked("email", 3, FIRST, 10) == in_order
    page = await holds.read_parked("email", 3, FIRST, 2)
    rest = await holds.read_parked("email", 3, parked_position(page[-1]), 10)
    assert page + rest == in_order
    assert await holds.read_parked("sms", 3, FIRST, 10) == [others[0]]
    assert await holds.count_parked("email", 100) == 6  # both shards
    assert await holds.count_parked("email", 4) == 4  # counted no further than asked
    await holds.unpark(in_order[:3])
    assert await holds.read_parked("email", 3, FIRST, 10) == in_order[3:]
    assert await holds.count_parked("email", 100) == 3


async def test_a_skip_cancels_only_a_task_the_parked_row_still_fires(
    hold_backend: HoldBackend,
) -> None:
    holds, tasks = hold_backend.holds, hold_backend.tasks
    for task_id in ("fires", "moved", "claimed"):
        await tasks.create(make_task(task_id, queue="email", due_ms=T0, shard_count=SHARDS))
    rows = {t.task_id: t.entry() for t in [await tasks.get("default", i) for i in
                                              ("fires", "moved", "claimed")]}  # fmt: skip
    await tasks.reschedule("default", "moved", to_ms=T0 + 60_000, payload=None, now_ms=T0 + 1)
    assert (await tasks.mark_dispatched([rows["claimed"]], T0 + 2)).entries
    skipped = await holds.skip(list(rows.values()), "held too long", T0 + 5)
    assert [e.task_id for e in skipped] == ["fires"]
    fired = await tasks.get("default", "fires")
    assert (fired.state, fired.last_error_type, fired.last_error_message) == (
        TaskState.CANCELLED, SKIPPED, "held too long",
    )  # fmt: skip
    assert (await tasks.get("default", "moved")).state is TaskState.SCHEDULED
    assert (await tasks.get("default", "claimed")).state is TaskState.DISPATCHED
    assert await holds.skip([rows["fires"]], "again", T0 + 6) == []
