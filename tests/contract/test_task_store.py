"""The TaskStore contract (tikk.store.tasks), run against every backend."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from tests.contract.conftest import Reopen
from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.clock import ManualClock
from tikk.errors import (
    AlreadyExists,
    BackendUnavailable,
    CancelUnsettled,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StaleOwner,
)
from tikk.model import (
    START_TIMEOUT,
    Cursor,
    DeadLetter,
    Page,
    RetryAt,
    Succeed,
    Task,
    TaskState,
)
from tikk.store.cassandra.tasks import CassandraTaskStore
from tikk.store.sqlite.tasks import SqliteTaskStore
from tikk.store.tasks import TaskStore, advance_cursor

# Scans start after a cursor; a store's cursors never start before it existed (T0 here).
START = (second_of(T0) - 120, "")


async def read_all(store: TaskStore, shard: int, until_ms: int) -> list[str]:
    rows = await store.read_due(shard, START, second_of(until_ms), 10_000)
    return [r.task_id for r in rows]


async def test_ping_answers_while_open_and_is_unavailable_once_closed(store: TaskStore) -> None:
    await store.ping()
    await store.ping()  # idempotent, and it wrote nothing a read would see
    assert await store.list_tasks("default", "q", None, 10, "") == Page([])
    await store.close()  # the fixture closes it again: close is idempotent
    with pytest.raises(BackendUnavailable):
        await store.ping()


async def test_create_then_get_round_trips(store: TaskStore) -> None:
    task = make_task("a", payload=b"\x00\xffbytes")
    stored, created = await store.create(task)
    assert created and stored == task
    assert await store.get("default", "a") == task


async def test_create_is_idempotent_for_same_content(store: TaskStore) -> None:
    task = make_task("a")
    await store.create(task)
    again, created = await store.create(task)
    assert not created and again == task


async def test_same_id_different_content_is_already_exists(store: TaskStore) -> None:
    await store.create(make_task("a", payload=b"one"))
    with pytest.raises(AlreadyExists):
        await store.create(make_task("a", payload=b"two"))
    assert (await store.get("default", "a")).payload == b"one"


async def test_ids_are_scoped_by_namespace(store: TaskStore) -> None:
    await store.create(make_task("a", namespace="n1", payload=b"one"))
    _, created = await store.create(make_task("a", namespace="n2", payload=b"two"))
    assert created
    assert (await store.get("n2", "a")).payload == b"two"
    with pytest.raises(NotFound):
        await store.get("n3", "a")


async def test_create_many_reports_each_item(store: TaskStore) -> None:
    await store.create(make_task("taken", payload=b"x"))
    outcomes = await store.create_many(
        [make_task("n1"), make_task("taken", payload=b"y"), make_task("n2")]
    )
    assert isinstance(outcomes[1], AlreadyExists)
    assert [o[1] for o in (outcomes[0], outcomes[2]) if not isinstance(o, Exception)] == [
        True,
        True,
    ]
    assert (await store.get("default", "n2")).task_id == "n2"


async def test_an_id_twice_in_one_batch_is_created_once(store: TaskStore) -> None:
    twice, other = make_task("twice"), make_task("twice", payload=b"other")
    outcomes = await store.create_many([twice, make_task("n1"), twice])
    # Which of the two copies counts as the create is the backend's choice; one of them is.
    assert sorted([outcomes[0], outcomes[2]], key=str) == [(twice, False), (twice, True)]
    [refused] = await store.create_many([other])
    assert isinstance(refused, AlreadyExists)
    rows = await read_all(store, twice.shard, twice.due_ms)
    assert rows.count("twice") == 1
    assert (await store.get("default", "twice")).payload == twice.payload


async def test_read_due_returns_only_the_requested_slice_in_order(store: TaskStore) -> None:
    # Tasks of one shard across three minutes; ids chosen so they share a shard.
    shard = make_task("x0").shard
    ids = [f"x{i}" for i in range(400) if make_task(f"x{i}").shard == shard][:6]
    dues = [T0 + 1_000, T0 + 1_500, T0 + 61_000, T0 + 62_000, T0 + 125_000, T0 + 125_000]
    for tid, due in zip(ids, dues, strict=True):
        await store.create(make_task(tid, due_ms=due))
    rows = await store.read_due(shard, START, second_of(T0 + 62_000), 100)
    assert [r.task_id for r in rows] == ids[:4]
    assert [r.due_ms for r in rows] == dues[:4]
    # Strictly after a position: same second, later key only.
    after = rows[0].position
    rest = await store.read_due(shard, after, second_of(T0 + 200_000), 100)
    assert [r.task_id for r in rest] == ids[1:]
    # Limit pages through in position order.
    page = await store.read_due(shard, START, second_of(T0 + 200_000), 2)
    assert [r.task_id for r in page] == ids[:2]


async def _page_through(store: TaskStore, shard: int, until_ms: int, limit: int) -> list[str]:
    """Every row up to ``until_ms`` read as the dispatcher reads: pages of ``limit``, each
    after the last row of the one before, until one comes back short."""
    start, found = START, []
    while True:
        rows = await store.read_due(shard, start, second_of(until_ms), limit)
        found += [r.task_id for r in rows]
        if len(rows) < limit:
            return found
        start = rows[-1].position


async def test_a_moved_rows_late_hand_off_mark_does_not_end_a_page_early(
    store: TaskStore,
) -> None:
    # The mark of a delivery that lost its claim to a move lands after the row was deleted
    # (on Cassandra it leaves a husk with no due time). A page must still end short only at
    # the end of the range, or the rows after the husk are never read.
    shard = make_task("x0").shard
    ids = [f"x{i}" for i in range(400) if make_task(f"x{i}").shard == shard][:4]
    dues = [T0 + 1_000, T0 + 2_000, T0 + 3_000, T0 + 61_000]
    tasks = [make_task(tid, due_ms=due) for tid, due in zip(ids, dues, strict=True)]
    await store.create_many(tasks)
    first = tasks[0]
    away = T0 + 200_000
    assert await store.move_due(
        "default", first.task_id, attempt=1, due_ms=first.due_ms, to_ms=away, now_ms=T0 + 1
    )
    await store.mark_handed_off([first.entry()], first.due_ms)
    for limit in (1, 2, 100):
        assert await _page_through(store, shard, T0 + 62_000, limit) == ids[1:], limit


async def test_due_entry_carries_what_publishing_needs(store: TaskStore) -> None:
    task = make_task("a", payload=b"data", max_attempts=7)
    await store.create(task)
    (entry,) = await store.read_due(task.shard, START, second_of(task.due_ms), 10)
    assert (entry.queue, entry.handler, entry.payload) == ("q", "h", b"data")
    assert entry.labels == {"team": "a"}
    assert entry.max_attempts == 7
    assert entry.idempotency_key == task.idempotency_key


TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


async def test_trace_context_is_kept_by_task_due_row_and_retries(store: TaskStore) -> None:
    a = make_task("a").evolve(trace_context=TRACE)
    await store.create(a)
    assert (await store.get("default", "a")).trace_context == TRACE
    (entry,) = await store.read_due(a.shard, START, second_of(a.due_ms), 10)
    assert entry.trace_context == TRACE
    await store.mark_dispatched([entry], a.due_ms)
    retry_at = a.due_ms + 90_000
    await store.finish_attempt("default", "a", 1, RetryAt(retry_at, "E", "m"), a.due_ms)
    rows = await store.read_due(a.shard, (second_of(a.due_ms), "~"), second_of(retry_at), 10)
    assert [r.trace_context for r in rows] == [TRACE]


async def test_timeouts_are_kept_by_task_due_row_and_retries(store: TaskStore) -> None:
    a = make_task("a").evolve(start_timeout_ms=5_000, execution_timeout_ms=30_000)
    await store.create(a)
    stored = await store.get("default", "a")
    assert (stored.start_timeout_ms, stored.execution_timeout_ms) == (5_000, 30_000)
    (entry,) = await store.read_due(a.shard, START, second_of(a.due_ms), 10)
    assert entry.execution_timeout_ms == 30_000
    await store.mark_dispatched([entry], a.due_ms)
    retry_at = a.due_ms + 90_000
    await store.finish_attempt("default", "a", 1, RetryAt(retry_at, "E", "m"), a.due_ms)
    rows = await store.read_due(a.shard, (second_of(a.due_ms), "~"), second_of(retry_at), 10)
    assert [r.execution_timeout_ms for r in rows if r.attempt == 2] == [30_000]


async def test_other_shards_are_not_read(store: TaskStore) -> None:
    task = make_task("a")
    await store.create(task)
    other = (task.shard + 1) % store.shard_count
    assert await read_all(store, other, task.due_ms) == []


async def test_cancel_removes_from_due_index(store: TaskStore) -> None:
    task = make_task("a")
    await store.create(task)
    cancelled = await store.cancel("default", "a", ManualClock(T0 + 5))
    assert cancelled.state is TaskState.CANCELLED
    assert await read_all(store, task.shard, task.due_ms) == []
    # Idempotent on an already-cancelled task.
    assert (await store.cancel("default", "a", ManualClock(T0 + 6))).state is TaskState.CANCELLED


async def test_cancel_refuses_dispatched_and_missing(store: TaskStore) -> None:
    task = make_task("a")
    await store.create(task)
    await store.mark_dispatched([task.entry()], T0)
    with pytest.raises(FailedPrecondition):
        await store.cancel("default", "a", ManualClock(T0))
    with pytest.raises(NotFound):
        await store.cancel("default", "missing", ManualClock(T0))


# How close to its due time each backend still cancels a task (``TaskStore.cancel``).
CANCEL_FENCE_MS = {SqliteTaskStore: 0, CassandraTaskStore: 2_000}


@pytest.mark.parametrize("lead_ms", [1, 500, 1_999, 2_000, 2_001, 10_000])
async def test_a_cancel_close_to_the_due_time_is_refused_only_inside_the_fence(
    store: TaskStore, lead_ms: int
) -> None:
    fence = CANCEL_FENCE_MS[type(store)]
    await store.create(make_task("a", due_ms=T0 + lead_ms))
    if lead_ms < fence:
        with pytest.raises(FailedPrecondition, match="due within 2000 ms"):
            await store.cancel("default", "a", ManualClock(T0))
        assert (await store.get("default", "a")).state is TaskState.SCHEDULED
    else:
        assert (await store.cancel("default", "a", ManualClock(T0))).state is TaskState.CANCELLED


class SlowStoreClock:
    """Reads ``times`` in turn, then the last for ever: the times at which a store that
    answered slowly checked the fence and then had the cancel acknowledged."""

    def __init__(self, *times: int) -> None:
        self._times = list(times)

    def now_ms(self) -> int:
        return self._times.pop(0) if len(self._times) > 1 else self._times[0]


async def test_a_cancel_acknowledged_inside_the_fence_is_never_answered_ok(
    store: TaskStore,
) -> None:
    task = make_task("a", due_ms=T0 + 10_000)
    await store.create(task)
    # Checked 10 s before the due time, acknowledged 1 s before it.
    slow = SlowStoreClock(T0, T0 + 9_000)
    if CANCEL_FENCE_MS[type(store)] > 1_000:
        with pytest.raises(CancelUnsettled, match="may still run once"):
            await store.cancel("default", "a", slow)
        # Asking again cannot turn the answer into OK, even long before the due time.
        with pytest.raises(CancelUnsettled):
            await store.cancel("default", "a", ManualClock(T0))
    else:
        assert (await store.cancel("default", "a", slow)).state is TaskState.CANCELLED
        assert (await store.cancel("default", "a", ManualClock(T0))).state is TaskState.CANCELLED
    # Cancelled either way: it never fires from here on.
    assert (await store.get("default", "a")).state is TaskState.CANCELLED
    assert await read_all(store, task.shard, task.due_ms) == []
    assert (await store.mark_dispatched([task.entry()], T0 + 10_000)).entries == []


async def test_mark_dispatched_filters_cancelled_and_allows_resend(store: TaskStore) -> None:
    a, b = make_task("a"), make_task("b")
    await store.create_many([a, b])
    await store.cancel("default", "b", ManualClock(T0))
    ok = await store.mark_dispatched([a.entry(), b.entry()], T0 + 10_000)
    assert ([e.task_id for e in ok.entries], ok.resent) == (["a"], 0)
    assert (await store.get("default", "a")).state is TaskState.DISPATCHED
    # After a crash the same row is published again (at-least-once), counted as a resend.
    again = await store.mark_dispatched([a.entry()], T0 + 10_500)
    assert ([e.task_id for e in again.entries], again.resent) == (["a"], 1)


async def test_a_handed_off_row_reads_as_handed_off(store: TaskStore) -> None:
    a, b = make_task("a"), make_task("b", due_ms=T0 + 10_000)
    await store.create_many([a, b])
    claimed = await store.mark_dispatched([a.entry(), b.entry()], a.due_ms)
    await store.mark_handed_off([e for e in claimed.entries if e.task_id == "a"], a.due_ms)
    rows = await store.read_due(a.shard, START, second_of(b.due_ms), 100)
    if b.shard != a.shard:
        rows += await store.read_due(b.shard, START, second_of(b.due_ms), 100)
    assert {r.task_id: r.handed_off for r in rows} == {"a": True, "b": False}


async def test_unsent_only_leaves_out_handed_off_rows_and_pages_past_them(
    store: TaskStore,
) -> None:
    # One shard: six rows in one second, the first four handed off. A limit of two must
    # still reach the unsent ones behind them, in order, and a plain read keeps them all.
    tasks = [make_task(f"t{i}", due_ms=T0 + 10_000 + i, shard_count=1) for i in range(6)]
    await store.create_many(tasks)
    claimed = await store.mark_dispatched([t.entry() for t in tasks], T0 + 10_000)
    await store.mark_handed_off(claimed.entries[:4], T0 + 10_010)
    until = second_of(T0 + 10_000)
    unsent = await store.read_due(0, START, until, 2, unsent_only=True)
    assert [r.task_id for r in unsent] == ["t4", "t5"]
    assert await store.read_due(0, unsent[-1].position, until, 2, unsent_only=True) == []
    assert [r.task_id for r in await store.read_due(0, START, until, 10)] == [
        f"t{i}" for i in range(6)
    ]


async def test_a_retry_written_into_the_same_second_is_not_handed_off(store: TaskStore) -> None:
    # The mark belongs to one delivery: the next attempt's row, even in the same second
    # (overwriting the row), must be sent.
    a = make_task("a", due_ms=T0 + 10_000)
    await store.create(a)
    await store.mark_dispatched([a.entry()], a.due_ms)
    retry_at = a.due_ms + 300  # the same second
    await store.finish_attempt("default", "a", 1, RetryAt(retry_at, "E", "m"), a.due_ms + 10)
    await store.mark_handed_off([a.entry()], a.due_ms + 20)  # a late mark of attempt 1
    rows = await store.read_due(a.shard, START, second_of(retry_at), 100)
    assert [(r.attempt, r.handed_off) for r in rows] == [(2, False)]


async def test_finish_attempt_success(store: TaskStore) -> None:
    a = make_task("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], T0)
    done = await store.finish_attempt("default", "a", 1, Succeed(), T0 + 1)
    assert done is not None and done.state is TaskState.SUCCEEDED
    # A duplicate report is stale and changes nothing.
    assert await store.finish_attempt("default", "a", 1, Succeed(), T0 + 2) is None


async def test_succeed_many_moves_only_the_attempts_still_dispatched(store: TaskStore) -> None:
    a, b, c, d = (make_task(t) for t in "abcd")
    await store.create_many([a, b, c, d])
    await store.mark_dispatched([a.entry(), b.entry(), c.entry()], T0)
    retry_at = T0 + 60_000
    await store.finish_attempt("default", "b", 1, RetryAt(retry_at, "E", "m"), T0 + 1)
    # a: dispatched; b: moved on to attempt 2; c: a report of another due time; d: scheduled.
    other_due = dataclasses.replace(c.entry(), due_ms=c.due_ms + 1)
    moved = await store.succeed_many([a.entry(), b.entry(), other_due, d.entry()], T0 + 2)
    assert moved == [True, False, False, False]
    states = [(await store.get("default", t)).state for t in "abcd"]
    assert states == [TaskState.SUCCEEDED, TaskState.SCHEDULED, TaskState.DISPATCHED,
                      TaskState.SCHEDULED]  # fmt: skip
    done = await store.get("default", "a")
    assert (done.attempt, done.due_ms, done.updated_ms) == (1, a.due_ms, T0 + 2)
    # Repeating a success is stale and changes nothing.
    assert await store.succeed_many([a.entry()], T0 + 3) == [False]
    assert (await store.get("default", "a")).updated_ms == T0 + 2


async def test_of_two_successes_of_one_attempt_exactly_one_holds(store: TaskStore) -> None:
    # A duplicate delivery: two runs of one attempt report success in one batch, together
    # from two servers, and one after the other.
    tasks = [make_task(t) for t in ("one-batch", "together", "in-turn")]
    await store.create_many(tasks)
    await store.mark_dispatched([t.entry() for t in tasks], T0)
    same, together, in_turn = (t.entry() for t in tasks)
    assert sorted(await store.succeed_many([same, same], T0 + 1)) == [False, True]
    (first,), (second,) = await asyncio.gather(
        store.succeed_many([together], T0 + 1), store.succeed_many([together], T0 + 1)
    )
    assert sorted([first, second]) == [False, True]
    assert await store.succeed_many([in_turn], T0 + 1) == [True]
    assert await store.succeed_many([in_turn], T0 + 2) == [False]
    assert {(await store.get("default", t.task_id)).state for t in tasks} == {TaskState.SUCCEEDED}


async def test_a_success_never_undoes_what_came_after_the_dispatch(store: TaskStore) -> None:
    a = make_task("a")
    await store.create_many([a])
    await store.mark_dispatched([a.entry()], T0)
    await store.finish_attempt("default", "a", 1, RetryAt(T0 + 60_000, "E", "m"), T0 + 1)
    assert await store.succeed_many([a.entry()], T0 + 2) == [False]  # the retry stands
    task = await store.get("default", "a")
    assert (task.state, task.attempt) == (TaskState.SCHEDULED, 2)


async def test_finish_attempt_retry_writes_future_bucket(store: TaskStore) -> None:
    a = make_task("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], a.due_ms)
    retry_at = a.due_ms + 90_000
    t = await store.finish_attempt("default", "a", 1, RetryAt(retry_at, "E", "m"), a.due_ms)
    assert t is not None
    assert (t.state, t.attempt, t.due_ms) == (TaskState.SCHEDULED, 2, retry_at)
    assert t.idempotency_key == a.idempotency_key
    rows = await store.read_due(a.shard, (second_of(a.due_ms), "~"), second_of(retry_at), 10)
    assert [(r.task_id, r.attempt, r.due_ms) for r in rows] == [("a", 2, retry_at)]
    # The old attempt can no longer be marked.
    assert (await store.mark_dispatched([a.entry()], retry_at)).entries == []


async def test_finish_attempt_dead_letter_and_redrive(store: TaskStore) -> None:
    a = make_task("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], T0)
    dead = await store.finish_attempt("default", "a", 1, DeadLetter("E", "bad"), T0 + 1)
    assert dead is not None and dead.state is TaskState.DEAD_LETTERED
    assert (dead.last_error_type, dead.last_error_message) == ("E", "bad")
    page = await store.list_dead_letters("default", "", 10, "", T0 + 1000)
    assert [t.task_id for t in page.items] == ["a"]
    again = await store.redrive("default", "a", T0 + 100)
    assert (again.state, again.attempt, again.due_ms) == (TaskState.SCHEDULED, 1, T0 + 100)
    assert (await store.list_dead_letters("default", "", 10, "", T0 + 1000)).items == []
    with pytest.raises(FailedPrecondition):
        await store.redrive("default", "a", T0 + 200)


async def test_a_purged_dead_letter_is_gone_and_only_a_dead_letter_is_purged(
    store: TaskStore,
) -> None:
    for task_id in ("a", "b"):
        await store.create(make_task(task_id, queue="q1"))
    await store.mark_dispatched([make_task("a", queue="q1").entry()], T0)
    await store.finish_attempt("default", "a", 1, DeadLetter("E", "bad"), T0 + 1)
    purged = await store.purge_dead_letter("default", "a")
    assert (purged.task_id, purged.state) == ("a", TaskState.DEAD_LETTERED)
    with pytest.raises(NotFound):
        await store.get("default", "a")
    assert (await store.list_dead_letters("default", "", 10, "", T0 + 1000)).items == []
    assert [t.task_id for t in (await store.list_tasks("default", "q1", None, 10, "")).items] == [
        "b"
    ]
    with pytest.raises(NotFound):
        await store.purge_dead_letter("default", "a")
    with pytest.raises(FailedPrecondition, match="scheduled, not dead-lettered"):
        await store.purge_dead_letter("default", "b")
    assert (await store.get("default", "b")).state is TaskState.SCHEDULED
    # The id is free again: a new task may take it.
    created, new = await store.create(make_task("a", queue="q1"))
    assert new and created.state is TaskState.SCHEDULED


async def test_finish_attempt_on_missing_task_is_not_found(store: TaskStore) -> None:
    with pytest.raises(NotFound):
        await store.finish_attempt("default", "nope", 1, Succeed(), T0)


async def test_list_tasks_pages_by_queue_and_state(store: TaskStore) -> None:
    for i in range(5):
        await store.create(make_task(f"t{i}", queue="q1"))
    await store.create(make_task("other", queue="q2"))
    await store.cancel("default", "t3", ManualClock(T0))
    first = await store.list_tasks("default", "q1", None, 2, "")
    second = await store.list_tasks("default", "q1", None, 2, first.next_token)
    third = await store.list_tasks("default", "q1", None, 2, second.next_token)
    ids = [t.task_id for p in (first, second, third) for t in p.items]
    assert sorted(ids) == ["t0", "t1", "t2", "t3", "t4"] and third.next_token == ""
    cancelled = await store.list_tasks("default", "q1", TaskState.CANCELLED, 10, "")
    assert [t.task_id for t in cancelled.items] == ["t3"]


async def test_cursor_is_fenced_by_epoch_and_never_goes_back(store: TaskStore) -> None:
    assert (await store.get_cursor(3)).second == 0
    await advance_cursor(store, 3, 100, epoch=5)
    await advance_cursor(store, 3, 90, epoch=5)
    assert (await store.get_cursor(3)).second == 100
    await advance_cursor(store, 3, 120, epoch=6)
    with pytest.raises(StaleOwner):
        await advance_cursor(store, 3, 200, epoch=5)
    cursor = await store.get_cursor(3)
    assert (cursor.second, cursor.epoch) == (120, 6)


async def test_cursors_move_together_and_stale_ones_are_refused(store: TaskStore) -> None:
    await store.advance_cursors({1: Cursor(50, 3), 2: Cursor(60, 3)})
    refused = await store.advance_cursors({1: Cursor(70, 2), 2: Cursor(80, 3), 4: Cursor(5, 1)})
    assert refused == {1}
    assert await store.get_cursor(1) == Cursor(50, 3)
    assert await store.get_cursor(2) == Cursor(80, 3)
    assert await store.get_cursor(4) == Cursor(5, 1)


async def test_rows_after_cursor_survive_cursor_moves(store: TaskStore) -> None:
    late = make_task("late", due_ms=T0 + 300_000)
    await store.create(late)
    await advance_cursor(store, late.shard, second_of(T0 + 200_000), epoch=1)
    rows = await store.read_due(
        late.shard, (second_of(T0 + 200_000) + 1, ""), second_of(late.due_ms), 10
    )
    assert [r.task_id for r in rows] == ["late"]


async def test_concurrent_creates_of_one_id_store_one_task(store: TaskStore) -> None:
    task = make_task("same")
    results = await asyncio.gather(*(store.create(task) for _ in range(10)))
    assert sum(created for _, created in results) == 1


async def test_create_many_with_fresh_ids_stores_task_and_due_row(store: TaskStore) -> None:
    tasks = [make_task(f"fresh{i}", due_ms=T0 + 1_000 + i) for i in range(20)]
    outcomes = await store.create_many(tasks, new_ids=True)
    assert all(not isinstance(o, Exception) and o[1] for o in outcomes)
    for t in tasks:
        assert await store.get("default", t.task_id) == t
    found = []
    for shard in range(store.shard_count):
        found += await store.read_due(shard, START, second_of(T0 + 2_000), 100)
    assert sorted(e.task_id for e in found) == sorted(t.task_id for t in tasks)


async def test_move_due_moves_a_scheduled_attempt_and_nothing_else(store: TaskStore) -> None:
    a, b = make_task("a"), make_task("b")
    await store.create_many([a, b])
    later = a.due_ms + 7_000
    moved = await store.move_due("default", "a", attempt=1, due_ms=a.due_ms, to_ms=later,
                                 now_ms=T0 + 1)  # fmt: skip
    assert moved is not None and (moved.due_ms, moved.scheduled_ms) == (later, a.scheduled_ms)
    assert [e.due_ms for e in await store.read_due(a.shard, START, second_of(later), 10)
            if e.task_id == "a"] == [later]  # fmt: skip
    # A task a dispatcher already took is left where it is.
    await store.mark_dispatched([b.entry()], b.due_ms)
    assert await store.move_due("default", "b", attempt=1, due_ms=b.due_ms, to_ms=later,
                                now_ms=T0 + 2) is None  # fmt: skip


async def test_cursors_are_read_together(store: TaskStore) -> None:
    await store.advance_cursors({1: Cursor(100, 7), 3: Cursor(200, 7)})
    assert await store.get_cursors() == {1: Cursor(100, 7), 3: Cursor(200, 7)}


async def test_the_shard_count_is_kept_with_the_data(store: TaskStore, reopen: Reopen) -> None:
    await store.check_shard_count()
    await store.check_shard_count()  # the same count again is fine
    other = await reopen(store.shard_count * 2)
    try:
        with pytest.raises(
            FailedPrecondition, match=rf"{store.shard_count}.*{store.shard_count * 2}"
        ):
            await other.check_shard_count()
    finally:
        await other.close()


async def test_two_reports_of_one_attempt_move_the_task_on_once(store: TaskStore) -> None:
    # A run reported twice at once (a re-sent result, a duplicate delivery's run): one
    # report decides, the other is stale, and neither undoes the other.
    a = make_task("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], a.due_ms)
    first, second = a.due_ms + 60_000, a.due_ms + 90_000
    outcomes = await asyncio.gather(
        store.finish_attempt("default", "a", 1, RetryAt(first, "E", "m"), a.due_ms + 1),
        store.finish_attempt("default", "a", 1, RetryAt(second, "E", "m"), a.due_ms + 1),
    )
    winners = [t for t in outcomes if t is not None]
    assert len(winners) == 1
    stored = await store.get("default", "a")
    assert (stored.state, stored.attempt, stored.due_ms) == (
        TaskState.SCHEDULED, 2, winners[0].due_ms,
    )  # fmt: skip


def timed(task_id: str, timeout_ms: int = 5_000) -> Task:
    return make_task(task_id).evolve(start_timeout_ms=timeout_ms)


async def test_claiming_an_attempt_writes_its_start_deadline_row(store: TaskStore) -> None:
    a = timed("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], a.due_ms)
    deadline = a.due_ms + 5_000
    rows = await store.read_due(a.shard, START, second_of(deadline), 10)
    marks = [(r.attempt, r.due_ms, r.is_start_deadline) for r in rows if r.task_id == "a"]
    assert (-1, deadline, True) in marks
    [row] = [r for r in rows if r.is_start_deadline]
    assert row.guarded_attempt() == a.entry()


async def test_a_started_attempt_does_not_expire(store: TaskStore) -> None:
    a = timed("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], a.due_ms)
    assert await store.claim_start(a.entry(), a.due_ms + 100)
    assert await store.expire_start(a.entry(), "late", a.due_ms + 5_000) is None
    assert (await store.get("default", "a")).state is TaskState.DISPATCHED
    assert await store.claim_start(a.entry(), a.due_ms + 9_000)  # a redelivery still runs


async def test_an_expired_attempt_is_dead_lettered_and_never_starts(store: TaskStore) -> None:
    a = timed("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], a.due_ms)
    dead = await store.expire_start(a.entry(), "nobody consumes q", a.due_ms + 5_000)
    assert dead is not None
    assert (dead.state, dead.last_error_type, dead.last_error_message) == (
        TaskState.DEAD_LETTERED, START_TIMEOUT, "nobody consumes q",
    )  # fmt: skip
    assert not await store.claim_start(a.entry(), a.due_ms + 5_001)
    again = await store.expire_start(a.entry(), "nobody consumes q", a.due_ms + 6_000)
    assert again is not None and again.state is TaskState.DEAD_LETTERED  # harmless repeat
    page = await store.list_dead_letters("default", "", 10, "", a.due_ms + 10_000)
    assert [t.task_id for t in page.items] == ["a"]


async def test_of_a_start_and_an_expiry_racing_exactly_one_wins(store: TaskStore) -> None:
    tasks = [timed(f"t{i}") for i in range(20)]
    await store.create_many(tasks)
    await store.mark_dispatched([t.entry() for t in tasks], T0 + 10_000)
    for t in tasks:
        started, expired = await asyncio.gather(
            store.claim_start(t.entry(), t.due_ms + 4_999),
            store.expire_start(t.entry(), "late", t.due_ms + 5_000),
        )
        assert started != (expired is not None), t.task_id
        state = (await store.get("default", t.task_id)).state
        assert state is (TaskState.DISPATCHED if started else TaskState.DEAD_LETTERED)


async def test_a_redriven_task_can_start_again(store: TaskStore) -> None:
    a = timed("a")
    await store.create(a)
    await store.mark_dispatched([a.entry()], a.due_ms)
    await store.expire_start(a.entry(), "late", a.due_ms + 5_000)
    again = await store.redrive("default", "a", a.due_ms + 60_000)
    await store.mark_dispatched([again.entry()], again.due_ms)
    assert await store.claim_start(again.entry(), again.due_ms + 10)


async def labelled(
    store: TaskStore, namespace: str, label: tuple[str, str], size: int
) -> list[str]:
    """Every task id the label listing gives, page by page (short pages included)."""
    ids, token = [], ""
    while True:
        page = await store.list_by_label(namespace, label, size, token)
        assert len(page.items) <= size
        ids += [t.task_id for t in page.items]
        token = page.next_token
        if not token:
            return ids


async def test_tasks_are_found_by_label_through_its_listing(store: TaskStore) -> None:
    acme, other = {"customer": "acme", "tier": "gold"}, {"customer": "acme-2"}
    odd = {"customer": "a=b, ünï"}
    for i in range(25):
        await store.create(dataclasses.replace(make_task(f"a{i:02}"), labels=acme))
    await store.create(dataclasses.replace(make_task("o1"), labels=other))
    await store.create(dataclasses.replace(make_task("n1"), labels={}))
    await store.create(dataclasses.replace(make_task("x1", namespace="elsewhere"), labels=acme))
    await store.create(dataclasses.replace(make_task("odd"), labels=odd))
    found = await labelled(store, "default", ("customer", "acme"), 7)
    assert sorted(found) == [f"a{i:02}" for i in range(25)] and len(set(found)) == 25
    assert sorted(await labelled(store, "default", ("tier", "gold"), 100)) == sorted(found)
    assert await labelled(store, "default", ("customer", "a=b, ünï"), 5) == ["odd"]
    assert await labelled(store, "elsewhere", ("customer", "acme"), 5) == ["x1"]
    assert await labelled(store, "default", ("customer", "nobody"), 5) == []
    page = await store.list_by_label("default", ("customer", "acme"), 3, "")
    assert all(t.labels == acme and t.state is TaskState.SCHEDULED for t in page.items)
    with pytest.raises(InvalidArgument):
        await store.list_by_label("default", ("customer", "acme"), 3, "not-a-token")


async def test_a_purged_task_leaves_its_labels_listing(store: TaskStore) -> None:
    await store.create(dataclasses.replace(make_task("a"), labels={"customer": "acme"}))
    await store.create(dataclasses.replace(make_task("b"), labels={"customer": "acme"}))
    await store.mark_dispatched([make_task("a").entry()], T0)
    await store.finish_attempt("default", "a", 1, DeadLetter("E", "bad"), T0 + 1)
    await store.purge_dead_letter("default", "a")
    assert await labelled(store, "default", ("customer", "acme"), 10) == ["b"]


async def test_a_labels_tasks_are_counted_in_a_state_and_up_to_a_limit(store: TaskStore) -> None:
    for i in range(12):
        await store.create(dataclasses.replace(make_task(f"a{i:02}"), labels={"customer": "acme"}))
    await store.create(dataclasses.replace(make_task("b"), labels={"customer": "bolt"}))
    await store.cancel("default", "a00", ManualClock(T0))
    acme = ("customer", "acme")
    assert await store.count_by_label("default", acme, None, 100) == (12, True)
    assert await store.count_by_label("default", acme, TaskState.SCHEDULED, 100) == (11, True)
    assert await store.count_by_label("default", acme, TaskState.CANCELLED, 100) == (1, True)
    assert await store.count_by_label("default", acme, None, 5) == (5, False)
    assert await store.count_by_label("other", acme, None, 5) == (0, True)


async def due_ids(store: TaskStore, shard: int, second: int) -> list[tuple[str, int, bytes]]:
    """(task id, due ms, payload) of every due row of ``shard`` in ``second``."""
    rows = await store.read_due(shard, (second - 1, "\uffff"), second, 100)
    return [(r.task_id, r.due_ms, r.payload) for r in rows if r.second == second]


@pytest.mark.parametrize("shift_ms", [60_000, -5_000, 250])
async def test_a_scheduled_task_is_rescheduled_with_its_row_and_payload(
    store: TaskStore, shift_ms: int
) -> None:
    t = make_task("a", due_ms=T0 + 10_000)
    await store.create(t)
    to = t.due_ms + shift_ms
    moved = await store.reschedule("default", "a", to_ms=to, payload=b"new", now_ms=T0 + 1)
    assert (moved.due_ms, moved.payload, moved.state, moved.attempt) == (
        to, b"new", TaskState.SCHEDULED, 1,
    )  # fmt: skip
    assert await store.get("default", "a") == moved
    assert await due_ids(store, t.shard, second_of(to)) == [("a", to, b"new")]
    if second_of(to) != second_of(t.due_ms):
        assert await due_ids(store, t.shard, second_of(t.due_ms)) == []
    kept = await store.reschedule("default", "a", to_ms=to + 1, payload=None, now_ms=T0 + 2)
    assert kept.payload == b"new"


async def test_only_a_scheduled_task_is_rescheduled(store: TaskStore) -> None:
    t = make_task("a")
    await store.create(t)
    await store.mark_dispatched([t.entry()], T0)
    with pytest.raises(FailedPrecondition, match="dispatched and can no longer be rescheduled"):
        await store.reschedule("default", "a", to_ms=T0 + 99_000, payload=None, now_ms=T0)
    with pytest.raises(NotFound):
        await store.reschedule("default", "nope", to_ms=T0 + 99_000, payload=None, now_ms=T0)
    assert (await store.get("default", "a")).due_ms == t.due_ms


async def test_finished_tasks_older_than_a_time_are_pruned_and_open_ones_kept(
    store: TaskStore,
) -> None:
    for i in range(5):
        t = dataclasses.replace(make_task(f"d{i}"), labels={"k": "v"})
        await store.create(t)
        await store.mark_dispatched([t.entry()], T0)
        await store.finish_attempt("default", t.task_id, 1, Succeed(), T0 + i)
    await store.create(make_task("open"))
    await store.create(make_task("x", namespace="other"))
    deleted = await store.prune_finished("default", T0 + 3, 2)  # d0..d2 are older; 2 at most
    assert deleted in (0, 2)  # 0: a store whose rows expire by themselves (TTL)
    left = {t.task_id for t in (await store.list_tasks("default", "q", None, 100, "")).items}
    assert len(left) == 6 - deleted and {"open", "d3", "d4"} <= left
    assert await store.prune_finished("default", T0 + 3, 10) == (1 if deleted else 0)
    assert (await store.get("default", "open")).state is TaskState.SCHEDULED
    if deleted:  # what the label index held of them went with them
        assert await labelled(store, "default", ("k", "v"), 10) == ["d3", "d4"]


async def test_many_tasks_are_cancelled_at_once_each_with_its_outcome(store: TaskStore) -> None:
    for task_id in ("a", "b", "c"):
        await store.create(make_task(task_id))
    await store.mark_dispatched([make_task("b").entry()], T0)
    await store.cancel("default", "c", ManualClock(T0))
    outcomes = await store.cancel_many("default", ["a", "b", "c", "nope"], ManualClock(T0 + 1))
    a, b, c, nope = outcomes
    assert isinstance(a, Task) and (a.state, a.updated_ms) == (TaskState.CANCELLED, T0 + 1)
    assert isinstance(b, FailedPrecondition) and "dispatched" in str(b)
    assert isinstance(c, Task) and (c.state, c.updated_ms) == (TaskState.CANCELLED, T0)
    assert isinstance(nope, NotFound)
    assert (await store.get("default", "a")).state is TaskState.CANCELLED
    assert (await store.get("default", "b")).state is TaskState.DISPATCHED
