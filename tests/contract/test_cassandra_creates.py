"""Writes of more than one partition on Cassandra, interrupted half-way by a killed process.

Creates are whole or invisible: a create with a client id takes two writes (the task row under
a lightweight transaction, then its due row and listing), and a process killed between them
must not leave a task that lists as SCHEDULED but never runs. Likewise a finished attempt's
task row and its retry's due row: the repeated report completes what the dead process left,
whether it reads the task before or after the first report's write."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from server.wiring import TASK_STORES, Drivers
from tests.contract import cassandra_keyspace
from tests.contract.conftest import open_backend
from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.errors import AlreadyExists, NotFound
from tikk.model import RetryAt, Succeed, Task, TaskState, apply_transition
from tikk.store.cassandra.tasks import (
    CREATE_TASK,
    INSERT_DUE,
    CassandraTaskStore,
    due_values,
    task_values,
)

SHARDS = 16


@pytest.fixture
async def cstore(keyspace: cassandra_keyspace.TestKeyspace) -> AsyncIterator[CassandraTaskStore]:
    store = await open_backend(TASK_STORES, keyspace.fresh(), Drivers())
    assert isinstance(store, CassandraTaskStore)
    yield store
    await store.close()


async def first_write_only(store: CassandraTaskStore, name: str) -> None:
    """What a server killed right after the first write of a create leaves behind."""
    task = make_task(name, shard_count=SHARDS)
    await store.session.execute(CREATE_TASK, [*task_values(task), 86_400])


async def test_a_half_written_create_is_invisible(cstore: CassandraTaskStore) -> None:
    await first_write_only(cstore, "half")
    with pytest.raises(NotFound):
        await cstore.get("default", "half")
    page = await cstore.list_tasks("default", "q", None, 100, "")
    assert [t.task_id for t in page.items] == []
    with pytest.raises(NotFound):
        await cstore.cancel("default", "half", T0)


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
    assert (await cstore.mark_dispatched([task.entry()], task.due_ms)).entries == []
    # The client's retry completes it; only then does its row fire it.
    stored, _ = await cstore.create(task)
    assert stored.state is TaskState.SCHEDULED
    claimed = await cstore.mark_dispatched([task.entry()], task.due_ms)
    assert claimed.entries == [task.entry()]
    assert (await cstore.get("default", "early")).state is TaskState.DISPATCHED


async def test_other_content_for_a_half_written_id_is_refused(cstore: CassandraTaskStore) -> None:
    await first_write_only(cstore, "half")
    with pytest.raises(AlreadyExists, match="interrupted"):
        await cstore.create(make_task("half", payload=b"other", shard_count=SHARDS))


async def test_a_retry_whose_due_row_was_never_written_is_healed(
    cstore: CassandraTaskStore,
) -> None:
    task = make_task("r", shard_count=SHARDS)
    await cstore.create(task)
    await cstore.mark_dispatched([task.entry()], task.due_ms)
    dispatched = await cstore.get("default", "r")
    retry = apply_transition(dispatched, RetryAt(task.due_ms + 5_000, "E", "m"), task.due_ms)
    # The server moved the task row on, then died before writing the retry's due row.
    assert await cstore._update_if(retry, dispatched, task.due_ms)
    start = (second_of(T0) - 60, "")
    before = await cstore.read_due(task.shard, start, second_of(retry.due_ms), 10)
    assert [r.attempt for r in before] == [1]
    # The worker never got an acknowledgement, so it reports again: stale, but it heals.
    again = RetryAt(retry.due_ms, "E", "m")
    assert await cstore.finish_attempt("default", "r", 1, again, task.due_ms + 1) is None
    rows = await cstore.read_due(task.shard, start, second_of(retry.due_ms), 10)
    assert [(r.attempt, r.due_ms) for r in rows if r.attempt == 2] == [(2, retry.due_ms)]


async def test_a_repeat_that_read_before_the_first_reports_write_heals_too(
    cstore: CassandraTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first report's write stalled in the store and its server gave up; the worker's
    repeat read the task while still dispatched, and the first write landed just before the
    repeat's own. The repeat must still write the retry's due row."""
    task = make_task("raced", shard_count=SHARDS)
    await cstore.create(task)
    await cstore.mark_dispatched([task.entry()], task.due_ms)
    dispatched = await cstore.get("default", "raced")
    first = apply_transition(dispatched, RetryAt(task.due_ms + 5_000, "E", "m"), task.due_ms)
    own_write = cstore._update_if

    async def first_lands_before(new: Task, read: Task, now_ms: int) -> bool:
        assert await own_write(first, dispatched, task.due_ms)
        return await own_write(new, read, now_ms)

    monkeypatch.setattr(cstore, "_update_if", first_lands_before)
    again = RetryAt(task.due_ms + 7_000, "E", "m")
    assert await cstore.finish_attempt("default", "raced", 1, again, task.due_ms + 1) is None
    stored = await cstore.get("default", "raced")
    assert (stored.state, stored.attempt, stored.due_ms) == (TaskState.SCHEDULED, 2, first.due_ms)
    start = (second_of(T0) - 60, "")
    rows = await cstore.read_due(task.shard, start, second_of(first.due_ms), 10)
    assert [(r.attempt, r.due_ms) for r in rows if r.attempt == 2] == [(2, first.due_ms)]


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
