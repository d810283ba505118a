"""Queue controls and parked rows on SQLite, in the task store's file; semantics in
``tikk.store.queue_holds``. A parked row has the due index's columns, keyed by queue, shard
and due time."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from tikk.buckets import minute_of_second
from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.model import DueEntry, TaskState
from tikk.queue_holds import SKIPPED, QueueControl
from tikk.store.queue_holds import ParkedPosition
from tikk.store.sqlite.quotas import TASK_USAGE_SCHEMA
from tikk.store.sqlite.schema import ADDED_COLUMNS, TASK_LABELS_SCHEMA, TASKS_SCHEMA
from tikk.store.sqlite.task_rows import due_row, entry_from_sql_row
from tikk.store.tasks import DUE_COLUMNS

QUEUE_HOLDS_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue_controls (
    queue TEXT PRIMARY KEY,
    paused INTEGER NOT NULL,
    paused_ms INTEGER NOT NULL,
    rate_per_s REAL NOT NULL,
    skip_older_than_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS parked (
    task_key TEXT NOT NULL,
    shard INTEGER NOT NULL,
    due_ms INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    queue TEXT NOT NULL,
    handler TEXT NOT NULL,
    payload BLOB NOT NULL,
    labels TEXT NOT NULL,
    max_attempts INTEGER NOT NULL,
    scheduled_ms INTEGER NOT NULL,
    trace_context TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    start_timeout_ms INTEGER NOT NULL,
    execution_timeout_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, shard, due_ms, task_key)
) WITHOUT ROWID;
"""
# Columns of ``parked`` added after it was first made.
_ADDED_PARKED_COLUMNS = {"parked": {"execution_timeout_ms": "INTEGER NOT NULL DEFAULT 0"}}
_CONTROL_COLUMNS = "queue, paused, paused_ms, rate_per_s, skip_older_than_ms, updated_ms"
_PARK = (
    f"INSERT OR REPLACE INTO parked (task_key, {', '.join(DUE_COLUMNS)})"
    f" VALUES ({', '.join('?' * (len(DUE_COLUMNS) + 1))})"
)
# A due-index read's columns: a parked row was never handed off.
_READ = (
    f"SELECT {', '.join(DUE_COLUMNS)}, NULL FROM parked WHERE queue = ? AND shard = ?"
    " AND (due_ms, task_key) > (?, ?) ORDER BY due_ms, task_key LIMIT ?"
)
_UNPARK = "DELETE FROM parked WHERE queue = ? AND shard = ? AND due_ms = ? AND task_key = ?"
_COUNT = "SELECT count(*) FROM (SELECT 1 FROM parked WHERE queue = ? LIMIT ?)"
_SKIP = (
    "UPDATE tasks SET state = ?, updated_ms = ?, last_error_type = ?, last_error_message = ?"
    " WHERE namespace = ? AND task_id = ? AND attempt = ? AND due_ms = ? AND state = ?"
)
_DELETE_DUE = "DELETE FROM due WHERE shard = ? AND minute = ? AND second = ? AND task_key = ?"


def _control(row: Any) -> QueueControl:
    queue, paused, paused_ms, rate, skip_ms, updated_ms = row
    return QueueControl(str(queue), bool(paused), int(paused_ms), float(rate), int(skip_ms),
                        int(updated_ms))  # fmt: skip


class SqliteQueueHoldStore:
    """``QueueHoldStore`` on the task store's SQLite file (``sqlite:///path``)."""

    def __init__(self, path: str) -> None:
        # The task tables first: a skip writes tasks, whose usage triggers must exist.
        schema = TASKS_SCHEMA + TASK_USAGE_SCHEMA + TASK_LABELS_SCHEMA + QUEUE_HOLDS_SCHEMA
        self._db = SqliteRunner(path, schema, {**ADDED_COLUMNS, **_ADDED_PARKED_COLUMNS})

    async def controls(self) -> dict[str, QueueControl]:
        sql = f"SELECT {_CONTROL_COLUMNS} FROM queue_controls"
        rows = await self._db.run(lambda conn: conn.execute(sql).fetchall())
        return {str(r[0]): _control(r) for r in rows}

    async def set_control(self, control: QueueControl) -> None:
        c = control
        row = (c.queue, int(c.paused), c.paused_ms, c.rate_per_s, c.skip_older_than_ms,
               c.updated_ms)  # fmt: skip
        sql = f"INSERT OR REPLACE INTO queue_controls ({_CONTROL_COLUMNS}) VALUES (?,?,?,?,?,?)"
        await self._db.run(lambda conn: _in_transaction(conn, [(sql, row)]))

    async def park(self, entries: Sequence[DueEntry]) -> None:
        writes = [(_PARK, (e.key, *due_row(e)[3:])) for e in entries]
        await self._db.run(lambda conn: _in_transaction(conn, writes))

    async def read_parked(
        self, queue: str, shard: int, after: ParkedPosition, limit: int
    ) -> list[DueEntry]:
        args = (queue, shard, after[0], after[1], limit)
        rows = await self._db.run(lambda conn: conn.execute(_READ, args).fetchall())
        return [entry_from_sql_row(r) for r in rows]

    async def unpark(self, entries: Sequence[DueEntry]) -> None:
        writes = [(_UNPARK, (e.queue, e.shard, e.due_ms, e.key)) for e in entries]
        await self._db.run(lambda conn: _in_transaction(conn, writes))

    async def count_parked(self, queue: str, most: int) -> int:
        rows = await self._db.run(lambda conn: conn.execute(_COUNT, (queue, most)).fetchall())
        return int(rows[0][0])

    async def skip(self, entries: Sequence[DueEntry], reason: str, now_ms: int) -> list[DueEntry]:
        def work(conn: sqlite3.Connection) -> list[DueEntry]:
            with Transaction(conn):
                return [e for e in entries if _skip(conn, e, reason, now_ms)]

        return await self._db.run(work)

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()


def _skip(conn: sqlite3.Connection, e: DueEntry, reason: str, now_ms: int) -> bool:
    args = (int(TaskState.CANCELLED), now_ms, SKIPPED, reason, e.namespace, e.task_id,
            e.attempt, e.due_ms, int(TaskState.SCHEDULED))  # fmt: skip
    if conn.execute(_SKIP, args).rowcount != 1:
        return False
    conn.execute(_DELETE_DUE, (e.shard, minute_of_second(e.second), e.second, e.key))
    return True


def _in_transaction(conn: sqlite3.Connection, writes: list[tuple[str, tuple[Any, ...]]]) -> None:
    with Transaction(conn):
        for sql, args in writes:
            conn.execute(sql, args)
