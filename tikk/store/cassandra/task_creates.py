"""Creating tasks on Cassandra: whole or invisible, many at a time.

Task rows are written first, all in flight at once, each in its own partition; then the rows
that point at them (due index, listing) in one unlogged batch per partition. A task with a
client-chosen id is created with a lightweight transaction (``IF NOT EXISTS``, which gives
idempotent create and ALREADY_EXISTS) and made visible by a mark written after its pointers;
server-assigned ids are unique and need neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tikk.buckets import minute_of_second
from tikk.drivers.cassandra import CassandraSession
from tikk.drivers.cassandra_batches import PartitionRow
from tikk.errors import AlreadyExists, TikkError
from tikk.model import Task
from tikk.store.cassandra.quotas import count_usage
from tikk.store.cassandra.schema import TASK_RETENTION_S
from tikk.store.cassandra.task_rows import (
    INSERT_DUE,
    due_values,
    half_written,
    label_writes,
    listing_write,
    task_from_cql_row,
    task_ttl,
    task_values,
)
from tikk.store.tasks import TASK_COLUMNS

_TASK_COLS = ", ".join(TASK_COLUMNS)
_MARKS = ", ".join("?" * len(TASK_COLUMNS))
# A create with a client id writes the task row first (IF NOT EXISTS) marked create_pending,
# then its due row, listing and create_done in one logged batch. A task that has the first
# mark and not the second is invisible. Two cells written once each, rather than one flipped,
# because a conditional write and a plain one on the same cell are ordered by their
# timestamps, which come from different clocks.
CREATE_TASK = (
    f"INSERT INTO tasks ({_TASK_COLS}, create_pending) VALUES ({_MARKS}, true)"
    " IF NOT EXISTS USING TTL ?"
)
# An id the server assigned is fresh and nobody knows it before the create returns, so its
# task row needs neither a transaction nor the marks: a create that dies before its due row
# leaves a row no listing shows and no client can name, which its TTL removes.
CREATE_NEW_TASK = f"INSERT INTO tasks ({_TASK_COLS}) VALUES ({_MARKS}) USING TTL ?"
COMPLETE_CREATE = (
    "UPDATE tasks USING TTL ? SET create_done = true WHERE namespace = ? AND task_id = ?"
)


async def create_tasks(
    db: CassandraSession,
    tasks: Sequence[Task],
    *,
    new_ids: bool = False,
    retention: Callable[[str], int] = lambda namespace: TASK_RETENTION_S,
) -> list[tuple[Task, bool] | TikkError]:
    """``TaskStore.create_many``. A dispatcher that read a due row whose task it could not
    find yet would take it for a stale row and drop it, so no pointer is written before its
    task row is durable. ``retention``: how long past its due time a namespace's task is
    kept (its rows' TTL)."""
    ttl = {_key(t): task_ttl(t, retention(t.namespace)) for t in tasks}
    if new_ids:
        await db.execute_many([db.bind(CREATE_NEW_TASK, _insert(t, ttl)) for t in tasks])
        await _write_pointers(db, tasks, ttl)
        count_usage(db, [(t.namespace, 1) for t in tasks])
        return [(t, True) for t in tasks]
    inserts = [db.bind(CREATE_TASK, _insert(t, ttl)) for t in tasks]
    answers = await db.execute_many(inserts)
    outcomes = [_create_outcome(t, rows) for t, rows in zip(tasks, answers, strict=True)]
    unfinished = [o.task for o in outcomes if isinstance(o, _Unfinished)]
    await _write_pointers(db, unfinished, ttl)
    await db.execute_many([
        db.bind(COMPLETE_CREATE, [ttl[_key(t)], t.namespace, t.task_id]) for t in unfinished
    ])  # fmt: skip
    # Counted after the completion mark: a create found half-written was never counted
    # by the try that died, so it is counted here, with the new ones.
    count_usage(db, [(t.namespace, 1) for t in unfinished])
    return [o.outcome() if isinstance(o, _Unfinished) else o for o in outcomes]


def _key(t: Task) -> tuple[str, str]:
    return (t.namespace, t.task_id)


def _insert(t: Task, ttl: Mapping[tuple[str, str], int]) -> list[Any]:
    """The parameters of a create's insert: the task's values, then its TTL."""
    return [*task_values(t), ttl[_key(t)]]


async def _write_pointers(
    db: CassandraSession, tasks: Sequence[Task], ttl: Mapping[tuple[str, str], int]
) -> None:
    """The due-index and listing rows of new tasks (listings with the tasks' ``ttl``, by
    namespace and id), batched by partition."""
    rows: list[PartitionRow] = []
    for t in tasks:
        entry = t.entry()
        due = (t.shard, minute_of_second(entry.second))
        due_row = due_values(entry, t.created_ms)
        rows.append(PartitionRow(("due", *due), INSERT_DUE, due_row, _row_bytes(t)))
        cql, params = listing_write(t, ttl[_key(t)])
        rows.append(PartitionRow(("listing", t.namespace, t.queue, t.shard), cql, params, 64))
        for cql, params in label_writes(t, ttl[_key(t)]):
            rows.append(PartitionRow(("label", *params[:3]), cql, params, 64))
    await db.execute_many(db.partition_batches(rows))


@dataclass(frozen=True)
class _Unfinished:
    """A create whose task row is written (now, or by an earlier try that died before its
    other rows): its pointers and completion mark are still to write."""

    task: Task
    created: bool

    def outcome(self) -> tuple[Task, bool]:
        return self.task, self.created


def _create_outcome(task: Task, rows: list[Any]) -> tuple[Task, bool] | TikkError | _Unfinished:
    """What the conditional insert of ``task`` found: nothing (created), the same task (done,
    or half-written by an interrupted try of the same create), or another task."""
    if not rows or rows[0][0]:
        return _Unfinished(task, True)
    existing = task_from_cql_row(rows[0])
    half = half_written(rows[0])
    if existing.fingerprint != task.fingerprint:
        by = " by a create that was interrupted" if half else ""
        return AlreadyExists(
            f"task {task.task_id!r} already exists in namespace {task.namespace!r} with "
            f"different content{by}"
        )
    return _Unfinished(existing, False) if half else (existing, False)


def _row_bytes(t: Task) -> int:
    """About what a task's due row weighs in a batch (fixed columns plus the variable ones)."""
    labels = sum(len(k) + len(v) for k, v in t.labels.items())
    trace = sum(len(k) + len(v) for k, v in t.trace_context.items())
    variable = len(t.task_id) * 2 + len(t.queue) + len(t.handler) + len(t.schedule_id)
    return 160 + len(t.payload) + labels + trace + variable
