"""How the SQLite task store lays out a task: the row of the task table and of the due index,
read back and written, inside the caller's transaction. The schedule store writes due rows
with these too."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from tikk.buckets import minute_of_second, second_of, task_key
from tikk.errors import NotFound
from tikk.model import DueEntry, RetryPolicy, Task, TaskState
from tikk.store.tasks import DUE_WRITE_COLUMNS, TASK_COLUMNS

_TASK_COLUMNS = ", ".join(TASK_COLUMNS)
_TASK_MARKS = ",".join("?" * len(TASK_COLUMNS))
# A due row goes in whole, replacing the row at its key (a task written again into the same
# second).
REPLACE_DUE = (
    f"INSERT OR REPLACE INTO due ({', '.join(DUE_WRITE_COLUMNS)})"
    f" VALUES ({','.join('?' * len(DUE_WRITE_COLUMNS))})"
)
INSERT_TASK = f"INSERT INTO tasks ({_TASK_COLUMNS}) VALUES ({_TASK_MARKS})"
# An upsert rather than INSERT OR REPLACE: a replace deletes the old row without firing its
# delete trigger, and the usage triggers (``tikk.store.sqlite.quotas``) must see the change
# of state as one update.
_SAVE_TASK = f"{INSERT_TASK} ON CONFLICT (namespace, task_id) DO UPDATE SET " + ", ".join(
    f"{c}=excluded.{c}" for c in TASK_COLUMNS[2:]
)


def _json(mapping: Mapping[str, str]) -> str:
    return json.dumps(dict(mapping)) if mapping else "{}"  # most tasks have none


def task_row(t: Task) -> tuple[object, ...]:
    r = t.retry
    return (
        t.namespace, t.task_id, t.queue, t.handler, t.payload, _json(t.labels),
        r.max_attempts, r.initial_backoff_ms, r.multiplier, r.max_backoff_ms, r.jitter,
        int(t.state), t.attempt, t.due_ms, t.scheduled_ms, t.created_ms, t.updated_ms,
        t.shard, t.fingerprint, t.last_error_type, t.last_error_message,
        _json(t.trace_context), t.schedule_id, t.start_timeout_ms, t.execution_timeout_ms,
    )  # fmt: skip


def task_from_sql_row(row: Any) -> Task:
    (ns, tid, queue, handler, payload, labels, max_att, init_ms, mult, max_ms, jitter,
     state, attempt, due_ms, sched_ms, created_ms, updated_ms, shard, fp, etype, emsg,
     trace, schedule_id, start_timeout_ms, execution_timeout_ms) = row  # fmt: skip
    return Task(
        namespace=str(ns), task_id=str(tid), queue=str(queue), handler=str(handler),
        payload=bytes(payload),
        labels=json.loads(str(labels)),
        retry=RetryPolicy(int(max_att), int(init_ms), float(mult), int(max_ms), float(jitter)),
        state=TaskState(state), attempt=int(attempt),
        due_ms=int(due_ms), scheduled_ms=int(sched_ms),
        created_ms=int(created_ms), updated_ms=int(updated_ms), shard=int(shard),
        fingerprint=str(fp), last_error_type=str(etype), last_error_message=str(emsg),
        trace_context=json.loads(str(trace)), schedule_id=str(schedule_id),
        start_timeout_ms=int(start_timeout_ms), execution_timeout_ms=int(execution_timeout_ms),
    )  # fmt: skip


def entry_from_sql_row(row: Any) -> DueEntry:
    (shard, due_ms, ns, tid, attempt, queue, handler, payload, labels, max_att, sched, trace,
     schedule_id, start_timeout_ms, execution_timeout_ms, handed_off_ms) = row  # fmt: skip
    return DueEntry(
        shard=int(shard), due_ms=int(due_ms), namespace=str(ns), task_id=str(tid),
        attempt=int(attempt), queue=str(queue), handler=str(handler),
        payload=bytes(payload), labels=json.loads(str(labels)),
        max_attempts=int(max_att), scheduled_ms=int(sched),
        trace_context=json.loads(str(trace)), schedule_id=str(schedule_id),
        start_timeout_ms=int(start_timeout_ms), execution_timeout_ms=int(execution_timeout_ms),
        handed_off=handed_off_ms == due_ms,
    )  # fmt: skip


def due_row(e: DueEntry) -> tuple[object, ...]:
    return (
        minute_of_second(e.second), e.second, e.key, e.shard, e.due_ms, e.namespace,
        e.task_id, e.attempt, e.queue, e.handler, e.payload, _json(e.labels),
        e.max_attempts, e.scheduled_ms, _json(e.trace_context), e.schedule_id,
        e.start_timeout_ms, e.execution_timeout_ms,
    )  # fmt: skip


def insert_due(conn: sqlite3.Connection, e: DueEntry) -> None:
    conn.execute(REPLACE_DUE, due_row(e))


def delete_due(conn: sqlite3.Connection, t: Task) -> None:
    """Remove the due row that fires ``t`` at its current due time."""
    second = second_of(t.due_ms)
    conn.execute(
        "DELETE FROM due WHERE shard=? AND minute=? AND second=? AND task_key=?",
        (t.shard, minute_of_second(second), second, task_key(t.namespace, t.task_id)),
    )


def fetch_task(conn: sqlite3.Connection, namespace: str, task_id: str) -> Task:
    """The task; ``NotFound`` if there is none."""
    row = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks WHERE namespace=? AND task_id=?", (namespace, task_id)
    ).fetchone()
    if row is None:
        raise NotFound(f"task {task_id!r} not found in namespace {namespace!r}")
    return task_from_sql_row(row)


def save_task(conn: sqlite3.Connection, t: Task) -> None:
    """Write ``t`` over its row (or as a new one)."""
    conn.execute(_SAVE_TASK, task_row(t))
