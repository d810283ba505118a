"""Writes of more than one partition on Cassandra, interrupted half-way by a killed process.

Creates are whole or invisible: a create with a client id takes two writes (the task row under
a lightweight transaction, then its due row and listing), and a process killed between them
must not leave a task that lists as SCHEDULED but never runs. Likewise a finished attempt's
task row and its retry's due row: the repeated report completes what the dead process left,
whether it reads the task before or after the first report's write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from history.sqlite import SqliteRunHistory
from server.ops.late_writes import LateWriteGuard
from server.ops.refusals import ResultRefused
from server.ops.results import ResultRecorder
from server.ops.start_timeouts import StartTimeouts
from server.wiring import TASK_STORES, Drivers
from tests.contract import cassandra_keyspace
from tests.contract.conftest import open_backend
from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.clock import ManualClock
from tikk.delivery_tokens import new_keys
from tikk.errors import AlreadyExists, NotFound
from tikk.model import (
    Cursor,
    Delivery,
    ResultKind,
    RetryAt,
    RunReport,
    Succeed,
    Task,
    TaskState,
    apply_transition,
)
from tikk.settings import DispatchSettings, Limits
from tikk.store.cassandra.task_creates import CREATE_TASK
from tikk.store.cassandra.task_rows import INSERT_DUE, SELECT_TASK, due_values, task_values
from tikk.store.cassandra.tasks import CassandraTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 16


@pytest.fixture
async def cstore(keyspace: cassandra_keyspace.TestKeyspace) -> AsyncIterator[CassandraTaskStore]:
    store = await open_backend(TASK_STORES, keyspace.fresh(), Drivers())
    assert isinstance(store, CassandraTaskStore)
    yield store
    await store.close()


async def first_write_only(store: CassandraTaskStore, name: str, due_ms: int = T0 + 10_000) -> None:
    """What a server killed right after the first write of a create leaves behind."""
    task = make_task(name, due_ms=due_ms, shard_count=SHARDS)
    await store.session.execute(CREATE_TASK, [*task_values(task), 86_400])


async def dispatched(store: CassandraTaskStore, name: str) -> Task:
    """A task created and claimed by a dispatcher at its due time."""
    task = make_task(name, shard_count=SHARDS)
    await store.create(task)
    await store.mark_dispatched([task.entry()], task.due_ms)
    return await store.get("default", name)


async def retried_without_its_row(store: CassandraTaskStore, name: str) -> Task:
    """What a server killed after moving a failed attempt's task row to its retry, and
    before writing the retry's due row, leaves behind; the retry."""
    task = await dispatched(store, name)
    retry = apply_transition(task, RetryAt(task.due_ms + 5_000, "E", "m"), task.due_ms)
    assert await store._update_if(retry, task, task.due_ms)
    return retry


async def retry_rows(store: CassandraTaskStore, retry: Task) -> list[tuple[int, int]]:
    """(attempt, due) of the due rows of ``retry``'s attempt up to its due second."""
    start = (second_of(T0) - 60, "")
    rows = await store.read_due(retry.shard, start, second_of(retry.due_ms), 10)
    return [(r.attempt, r.due_ms) for r in rows if r.attempt == retry.attempt]


async def test_a_half_written_create_is_invisible(cstore: CassandraTaskStore) -> None:
    await first_write_only(cstore, "half")
    with pytest.raises(NotFound):
        await cstore.get("default", "half")
    page = await cstore.list_tasks("default", "q", None, 100, "")
    assert [t.task_id for t in page.items] == []
    with pytest.raises(NotFound):
        await cstore.cancel("default", "half", ManualClock(T0))


async def test_retrying_the_create_makes_it_whole_and_due(cstore: CassandraTaskStore) -> None:
    await first_write_only(cstore, "half")
    task = make_task("half", shard_count=SHARDS)
    stored, _ = await cstore.create(task)
    assert stored.state is TaskState.SCHEDULED
    assert (await cstore.get("default", "half")).task_id == "half"
    rows = await cstore.read_due(task.shard, (second_of(T0) - 60, ""), second_of(task.due_ms), 10)
    assert [r.task_id for r in rows] == ["half"]
    page = await cstore.list_tasks("default", "q", TaskState.SCHEDULED, 100, "")
    assert [t.task_id for t in page.items] == ["half"]


async def test_a_half_written_create_is_not_fired_until_it_is_whole(
    cstore: CassandraTaskStore,
) -> None:
    # The server wrote the task row and its due row, then died before the completion mark.
    await first_write_only(cstore, "early")
    task = make_task("early", shard_count=SHARDS)
    await cstore.session.execute(INSERT_DUE, due_values(task.entry(), T0))
    early = await cstore.mark_dispatched([task.entry()], task.due_ms)
    assert (early.entries, early.unfinished) == ([], [task.entry()])
    assert (await cstore.session.execute(SELECT_TASK, ["default", "early"]))[0].state == int(
        TaskState.SCHEDULED
    )
    # The client's retry completes it; only then does its row fire it.
    stored, _ = await cstore.create(task)
    assert stored.state is TaskState.SCHEDULED
    claimed = await cstore.mark_dispatched([task.entry()], task.due_ms)
    assert claimed.entries == [task.entry()]
    assert (await cstore.get("default", "early")).state is TaskState.DISPATCHED


async def test_the_dispatcher_fires_a_create_finished_after_its_row_was_read(
    cstore: CassandraTaskStore, tmp_path: Path
) -> None:
    task = make_task("slow", due_ms=T0 + 1_000, shard_count=SHARDS)
    await first_write_only(cstore, "slow", task.due_ms)
    await cstore.session.execute(INSERT_DUE, due_values(task.entry(), T0))
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    await queue.start()
    await consumer.start()
    clock = ManualClock(T0)
    await cstore.advance_cursors({s: Cursor(second_of(T0) - 60, 1) for s in range(SHARDS)})
    settings = DispatchSettings(rescan_interval_ms=250, cursor_flush_interval_ms=0)
    dispatcher = Dispatcher(cstore, queue, SingleOwner(SHARDS, 1), clock, settings=settings)
    try:
        await dispatcher.tick(task.due_ms + 10)
        assert await consumer.fetch(10) == []  # read while its create was unfinished
        await cstore.create(task)  # the create finishes within the grace period
        for now in range(task.due_ms + 300, task.due_ms + 8_000, 250):
            await dispatcher.tick(now)
        fired = [m.delivery.task_id for m in await consumer.fetch(10)]
        assert fired == ["slow"]
        assert (await cstore.get("default", "slow")).state is TaskState.DISPATCHED
    finally:
        await consumer.close()
        await queue.close()


async def test_other_content_for_a_half_written_id_is_refused(cstore: CassandraTaskStore) -> None:
    await first_write_only(cstore, "half")
    with pytest.raises(AlreadyExists, match="interrupted"):
        await cstore.create(make_task("half", payload=b"other", shard_count=SHARDS))


async def test_a_retry_whose_due_row_was_never_written_is_healed(
    cstore: CassandraTaskStore,
) -> None:
    # The server moved the task row on, then died before writing the retry's due row.
    retry = await retried_without_its_row(cstore, "r")
    start = (second_of(T0) - 60, "")
    before = await cstore.read_due(retry.shard, start, second_of(retry.due_ms), 10)
    assert [r.attempt for r in before] == [1]
    # The worker never got an acknowledgement, so it reports again: stale, but it heals.
    again = RetryAt(retry.due_ms, "E", "m")
    assert await cstore.finish_attempt("default", "r", 1, again, retry.updated_ms + 1) is None
    assert await retry_rows(cstore, retry) == [(2, retry.due_ms)]


async def test_a_repeat_that_read_before_the_first_reports_write_heals_too(
    cstore: CassandraTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first report's write stalled in the store and its server gave up; the worker's
    repeat read the task while still dispatched, and the first write landed just before the
    repeat's own. The repeat must still write the retry's due row."""
    task = await dispatched(cstore, "raced")
    first = apply_transition(task, RetryAt(task.due_ms + 5_000, "E", "m"), task.due_ms)
    own_write = cstore._update_if

    async def first_lands_before(new: Task, read: Task, now_ms: int) -> bool:
        assert await own_write(first, task, task.due_ms)
        return await own_write(new, read, now_ms)

    monkeypatch.setattr(cstore, "_update_if", first_lands_before)
    again = RetryAt(task.due_ms + 7_000, "E", "m")
    assert await cstore.finish_attempt("default", "raced", 1, again, task.due_ms + 1) is None
    stored = await cstore.get("default", "raced")
    assert (stored.state, stored.attempt, stored.due_ms) == (TaskState.SCHEDULED, 2, first.due_ms)
    assert await retry_rows(cstore, first) == [(2, first.due_ms)]


async def test_a_dispatcher_that_stalled_between_read_and_claim_cannot_undo_a_report(
    cstore: CassandraTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dispatcher read the task scheduled and stalled (paused) before its claim. Meanwhile
    its successor claimed the task and the worker's failure moved it to its next attempt.
    The late claim must not set the task back to dispatched, where nothing would finish it."""
    task = make_task("stalled", shard_count=SHARDS)
    await cstore.create(task)
    session = cstore.session
    own_many = session.execute_many
    calls = 0

    async def others_act_before_the_claim(statements: Any, window: int = 256) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # the stalled dispatcher's writes, after its reads
            monkeypatch.setattr(session, "execute_many", own_many)
            await cstore.mark_dispatched([task.entry()], task.due_ms)
            retry = RetryAt(task.due_ms + 5_000, "E", "m")
            assert await cstore.finish_attempt("default", "stalled", 1, retry, task.due_ms + 1)
        return await own_many(statements, window)

    monkeypatch.setattr(session, "execute_many", others_act_before_the_claim)
    await cstore.mark_dispatched([task.entry()], task.due_ms)
    stored = await cstore.get("default", "stalled")
    assert (stored.state, stored.attempt) == (TaskState.SCHEDULED, 2)
    # Its retry still fires.
    claimed = await cstore.mark_dispatched([stored.entry()], stored.due_ms)
    assert claimed.entries == [stored.entry()]


@pytest.mark.parametrize(
    "kind", [ResultKind.FAILED, ResultKind.SUCCEEDED], ids=["failed", "succeeded"]
)
async def test_a_run_delivered_again_completes_a_retry_whose_reporter_died(
    cstore: CassandraTaskStore, tmp_path: Path, kind: ResultKind
) -> None:
    """The server recorded attempt 1's failure and died before the retry's due row; the
    worker died too before repeating its report, so the attempt was delivered again and
    another run of it reports. That report is refused (stale), and the retry still fires."""
    task = make_task("twice", shard_count=SHARDS)
    retry = await retried_without_its_row(cstore, "twice")
    history = SqliteRunHistory(str(tmp_path / "history.db"))
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    await history.start()
    await queue.start()
    clock, keys = ManualClock(task.due_ms + 2_000), new_keys()
    guard = LateWriteGuard(cstore, clock, grace_ms=5_000)
    expiry = StartTimeouts(cstore, history, queue)
    results = ResultRecorder(
        cstore, history, queue, clock, guard=guard, expiry=expiry, keys=keys, limits=Limits()
    )
    try:
        delivered = keys.signed(Delivery(task.entry(), task.due_ms))
        again = RunReport("run-2", delivered, kind, task.due_ms, clock.now_ms(), "w")
        with pytest.raises(ResultRefused, match="not its current attempt"):
            await results.record(again)
    finally:
        await queue.close()
        await history.close()
    stored = await cstore.get("default", "twice")
    assert (stored.state, stored.attempt, stored.due_ms) == (TaskState.SCHEDULED, 2, retry.due_ms)
    assert await retry_rows(cstore, retry) == [(2, retry.due_ms)]


async def test_a_half_done_move_is_finished_by_the_dispatcher(cstore: CassandraTaskStore) -> None:
    task = make_task("m", shard_count=SHARDS)
    await cstore.create(task)
    moved = task.evolve(due_ms=task.due_ms + 3_000)
    # The server wrote the moved row, then died before moving the task row.
    await cstore.session.execute(INSERT_DUE, due_values(moved.entry(), T0))
    claimed = await cstore.mark_dispatched([moved.entry()], moved.due_ms)
    assert claimed.entries == [moved.entry()]
    stored = await cstore.get("default", "m")
    assert (stored.state, stored.due_ms) == (TaskState.DISPATCHED, moved.due_ms)
    # The old row no longer matches, and the attempt finishes under the moved time.
    assert (await cstore.mark_dispatched([task.entry()], moved.due_ms)).entries == []
    done = await cstore.finish_attempt("default", "m", 1, Succeed(), moved.due_ms + 10)
    assert done is not None and done.state is TaskState.SUCCEEDED


async def test_a_move_refused_by_the_task_row_leaves_a_row_that_fires_nothing(
    cstore: CassandraTaskStore,
) -> None:
    task = make_task("d", shard_count=SHARDS)
    await cstore.create(task)
    await cstore.mark_dispatched([task.entry()], task.due_ms)
    to_ms = task.due_ms + 3_000
    assert await cstore.move_due(
        "default", "d", attempt=1, due_ms=task.due_ms, to_ms=to_ms, now_ms=task.due_ms
    ) is None  # fmt: skip
    stray = task.evolve(due_ms=to_ms).entry()
    assert (await cstore.mark_dispatched([stray], to_ms)).entries == []
    assert (await cstore.get("default", "d")).due_ms == task.due_ms


async def test_two_moves_of_one_late_task_at_once_leave_a_row_that_fires_it(
    cstore: CassandraTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create's confirmation and the read-back of its earlier, timed-out tries move the same
    late task in the same second. The one that read first writes its new row last, after the
    other's whole move: the row left must still fire the task the other moved."""
    task = make_task("late", shard_count=SHARDS)
    await cstore.create(task)
    second = second_of(task.due_ms) + 30
    winner = LateWriteGuard(cstore, ManualClock(second * 1_000 + 439), grace_ms=5_000)
    loser = LateWriteGuard(cstore, ManualClock(second * 1_000 + 300), grace_ms=5_000)
    session = cstore.session
    own_execute = session.execute

    async def winner_moves_in_between(cql: str, params: Any = ()) -> Any:
        if cql == INSERT_DUE:  # the loser's new row, written after its read of the task
            monkeypatch.setattr(session, "execute", own_execute)
            await winner.confirm([task])
        return await own_execute(cql, params)

    monkeypatch.setattr(session, "execute", winner_moves_in_between)
    await loser.confirm([task])
    stored = await cstore.get("default", "late")
    assert second_of(stored.due_ms) == second
    rows = await cstore.read_due(task.shard, (second, ""), second, 10)
    claimed = await cstore.mark_dispatched(rows, second * 1_000 + 999)
    assert [e.task_id for e in claimed.entries] == ["late"]
    assert (await cstore.get("default", "late")).state is TaskState.DISPATCHED


async def ttls(store: CassandraTaskStore, name: str) -> tuple[int | None, int | None, int | None]:
    """TTL(state), TTL(updated_ms) and TTL(queue) (a cell only a create writes) of a task."""
    rows = await store.session.execute(
        "SELECT TTL(state) AS s, TTL(updated_ms) AS u, TTL(queue) AS q FROM tasks"
        " WHERE namespace = ? AND task_id = ?", ["default", name],
    )  # fmt: skip
    return rows[0].s, rows[0].u, rows[0].q


async def test_a_cancel_or_a_claim_leaves_no_cell_that_outlives_the_task_row(
    cstore: CassandraTaskStore,
) -> None:
    # A cell written without a TTL would keep a husk of the row (state and update time, the
    # rest expired) for ever: read as a task with nothing in it, and never gone from disk.
    await cstore.create(make_task("cancelled", shard_count=SHARDS))
    await cstore.cancel("default", "cancelled", ManualClock(T0))
    await dispatched(cstore, "claimed")
    for name in ("cancelled", "claimed"):
        state, updated, queue = await ttls(cstore, name)
        assert queue is not None and state is not None and updated is not None, name
        assert state <= queue + 1 and updated <= queue + 1, name


async def test_a_namespaces_retention_is_its_task_rows_ttl_and_later_cells_end_with_them(
    cstore: CassandraTaskStore,
) -> None:
    day = 86_400
    cstore.keep_for("default", 2 * day)
    for name in ("kept", "cancelled", "claimed"):
        await cstore.create(make_task(name, shard_count=SHARDS))
    due_s = 10  # make_task's due time is 10 s after its creation
    state, _, queue = await ttls(cstore, "kept")
    assert queue is not None and 2 * day + due_s - 60 < queue <= 2 * day + due_s
    await cstore.cancel("default", "cancelled", ManualClock(T0))
    await cstore.mark_dispatched([(await cstore.get("default", "claimed")).entry()], T0 + 10_000)
    for name in ("cancelled", "claimed"):
        state, updated, queue = await ttls(cstore, name)
        assert queue is not None and queue <= 2 * day + due_s, name
        assert state is not None and updated is not None and state <= queue + 1, name
    cstore.keep_for("default", 60)  # less than a day: a day (a running task must not expire)
    await cstore.create(make_task("short", shard_count=SHARDS))
    assert day < ((await ttls(cstore, "short"))[2] or 0) <= day + due_s
    cstore.keep_for("default", None)
    await cstore.create(make_task("default", shard_count=SHARDS))
    assert ((await ttls(cstore, "default"))[2] or 0) > 29 * day
