"""Embedded task store on SQLite, with the due index shaped like the Cassandra table.

Each write is one transaction on the file's one connection (``SqliteRunner``). How a task is
laid out in rows is ``tikk.store.sqlite.task_rows``; creating tasks,
``tikk.store.sqlite.task_creates``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from tikk.buckets import DEFAULT_SHARD_COUNT, minute_of_second
from tikk.clock import Clock
from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.errors import NotFound, TikkError
from tikk.model import (
    START_TIMEOUT,
    Claimed,
    Cursor,
    DeadLetter,
    DueEntry,
    Page,
    Task,
    TaskState,
    Transition,
    apply_transition,
)
from tikk.paging import decode_token, encode_token
from tikk.store.sqlite.quotas import TASK_USAGE_SCHEMA
from tikk.store.sqlite.schema import ADDED_COLUMNS, TASK_LABELS_SCHEMA, TASKS_SCHEMA
from tikk.store.sqlite.task_creates import create_all, create_one
from tikk.store.sqlite.task_queries import (
    BY_LABEL,
    cancel_each,
    cancel_in,
    count_by_label_query,
    move_in,
    prune_finished,
)
from tikk.store.sqlite.task_rows import (
    entry_from_sql_row,
    fetch_task,
    insert_due,
    save_task,
    task_from_sql_row,
)
from tikk.store.tasks import (
    DUE_READ_COLUMNS,
    TASK_COLUMNS,
    check_shard_count,
    require_dead_lettered,
    require_scheduled,
)

_TASK_COLUMNS = ", ".join(TASK_COLUMNS)
_DUE_COLUMNS = ", ".join(DUE_READ_COLUMNS)
# A row not handed off: never marked, or marked for an earlier due time of its key.
_UNSENT = " AND (handed_off_ms IS NULL OR handed_off_ms != due_ms)"
# The task file's page cache. Its indexes grow with the tasks stored; at SQLite's default
# (2 MiB) a load of millions re-read index pages from the OS on every batch.
CACHE_MIB = 64


class SqliteTaskStore:
    """``TaskStore`` on one SQLite file (``sqlite:///path``); semantics in ``tikk.store.tasks``."""

    def __init__(self, path: str, shard_count: int = DEFAULT_SHARD_COUNT) -> None:
        schema = TASKS_SCHEMA + TASK_USAGE_SCHEMA + TASK_LABELS_SCHEMA
        self._db = SqliteRunner(path, schema, ADDED_COLUMNS, cache_mib=CACHE_MIB)
        self._shard_count = shard_count
        self._checked = False

    @property
    def shard_count(self) -> int:
        return self._shard_count

    async def check_shard_count(self) -> None:
        """Refuse to open a store that was created with another shard count."""

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO store_meta VALUES ('shard_count', ?)",
                (str(self._shard_count),),
            )
            stored = conn.execute("SELECT value FROM store_meta WHERE key='shard_count'").fetchone()
            check_shard_count(int(stored[0]), self._shard_count)

        await self._db.run(work)

    async def create(self, task: Task) -> tuple[Task, bool]:
        def work(conn: sqlite3.Connection) -> tuple[Task, bool]:
            with Transaction(conn):
                return create_one(conn, task)

        return await self._db.run(work)

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        def work(conn: sqlite3.Connection) -> list[tuple[Task, bool] | TikkError]:
            with Transaction(conn):
                return create_all(conn, tasks, new_ids=new_ids)

        return await self._db.run(work)

    async def get(self, namespace: str, task_id: str) -> Task:
        return await self._db.run(lambda conn: fetch_task(conn, namespace, task_id))

    async def cancel(self, namespace: str, task_id: str, clock: Clock) -> Task:
        def work(conn: sqlite3.Connection) -> Task:
            with Transaction(conn):
                return cancel_in(conn, namespace, task_id, clock.now_ms())

        return await self._db.run(work)

    async def cancel_many(
        self, namespace: str, task_ids: Sequence[str], clock: Clock
    ) -> list[Task | TikkError]:
        ids = list(task_ids)
        return await self._db.run(lambda conn: cancel_each(conn, namespace, ids, clock.now_ms()))

    async def list_tasks(
        self, namespace: str, queue: str, state: TaskState | None, page_size: int, page_token: str
    ) -> Page[Task]:
        after = decode_token(page_token, (str,))
        after_id = str(after[0]) if after else ""
        sql = f"SELECT {_TASK_COLUMNS} FROM tasks WHERE namespace=? AND queue=? AND task_id>?"
        args: list[object] = [namespace, queue, after_id]
        if state is not None:
            sql += " AND state=?"
            args.append(int(state))
        sql += " ORDER BY task_id LIMIT ?"
        args.append(page_size + 1)
        rows = await self._db.run(lambda conn: conn.execute(sql, args).fetchall())
        tasks = [task_from_sql_row(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return Page(tasks, encode_token(tasks[-1].task_id) if more else "")

    async def list_by_label(
        self, namespace: str, label: tuple[str, str], page_size: int, page_token: str
    ) -> Page[Task]:
        after = decode_token(page_token, (str,))
        args = (namespace, f"{label[0]}={label[1]}", str(after[0]) if after else "", page_size + 1)
        rows = await self._db.run(lambda conn: conn.execute(BY_LABEL, args).fetchall())
        tasks = [task_from_sql_row(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return Page(tasks, encode_token(tasks[-1].task_id) if more else "")

    async def count_by_label(
        self, namespace: str, label: tuple[str, str], state: TaskState | None, most: int
    ) -> tuple[int, bool]:
        sql, args = count_by_label_query(namespace, label, state, most)
        [(found,)] = await self._db.run(lambda conn: conn.execute(sql, args).fetchall())
        return min(int(found), most), found <= most

    async def list_dead_letters(
        self, namespace: str, queue: str, page_size: int, page_token: str, now_ms: int
    ) -> Page[Task]:
        after = decode_token(page_token, (int, str))
        sql = f"SELECT {_TASK_COLUMNS} FROM tasks WHERE namespace=? AND state=?"
        args: list[object] = [namespace, int(TaskState.DEAD_LETTERED)]
        if queue:
            sql += " AND queue=?"
            args.append(queue)
        if after:
            sql += " AND (updated_ms, task_id) < (?, ?)"
            args += after
        sql += " ORDER BY updated_ms DESC, task_id DESC LIMIT ?"
        args.append(page_size + 1)
        rows = await self._db.run(lambda conn: conn.execute(sql, args).fetchall())
        tasks = [task_from_sql_row(r) for r in rows[:page_size]]
        if len(rows) <= page_size:
            return Page(tasks)
        return Page(tasks, encode_token(tasks[-1].updated_ms, tasks[-1].task_id))

    async def read_due(
        self,
        shard: int,
        after: tuple[int, str],
        until_second: int,
        limit: int,
        *,
        unsent_only: bool = False,
    ) -> list[DueEntry]:
        after_second, after_key = after
        if until_second <= after_second - 1:
            return []
        # Bounds on the key's prefix as row values, so the read seeks to ``after`` in its
        # minute instead of scanning the minute from its start (``minute BETWEEN`` alone
        # would: its range ends the key's usable prefix).
        sql = (
            f"SELECT {_DUE_COLUMNS} FROM due WHERE shard=? AND (minute, second, task_key) >"
            " (?, ?, ?) AND (minute, second) <= (?, ?)"
            f"{_UNSENT if unsent_only else ''} ORDER BY minute, second, task_key LIMIT ?"
        )
        first, last = minute_of_second(after_second), minute_of_second(until_second)
        args = (shard, first, after_second, after_key, last, until_second, limit)
        rows = await self._db.run(lambda conn: conn.execute(sql, args).fetchall())
        return [entry_from_sql_row(r) for r in rows]

    async def mark_dispatched(self, entries: Sequence[DueEntry], now_ms: int) -> Claimed:
        def work(conn: sqlite3.Connection) -> Claimed:
            ok: list[DueEntry] = []
            resent = 0
            with Transaction(conn):
                for e in entries:
                    for state in (TaskState.SCHEDULED, TaskState.DISPATCHED):
                        if _claim(conn, e, state, now_ms):
                            ok.append(e)
                            resent += state is TaskState.DISPATCHED
                            if e.start_timeout_ms:
                                insert_due(conn, e.start_deadline())
                            break
            return Claimed(ok, resent)

        return await self._db.run(work)

    async def claim_start(self, entry: DueEntry, now_ms: int) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            with Transaction(conn):
                return _claim_start(conn, entry, "started", now_ms)

        return await self._db.run(work)

    async def expire_start(self, entry: DueEntry, reason: str, now_ms: int) -> Task | None:
        def work(conn: sqlite3.Connection) -> Task | None:
            with Transaction(conn):
                if not _claim_start(conn, entry, "expired", now_ms):
                    return None
                try:
                    task = fetch_task(conn, entry.namespace, entry.task_id)
                except NotFound:
                    return None
                if (task.attempt, task.due_ms) != (entry.attempt, entry.due_ms):
                    return None
                if task.state is TaskState.DEAD_LETTERED:
                    return task if task.last_error_type == START_TIMEOUT else None
                if task.state is not TaskState.DISPATCHED:
                    return None
                dead = apply_transition(task, DeadLetter(START_TIMEOUT, reason), now_ms)
                save_task(conn, dead)
                return dead

        return await self._db.run(work)

    async def mark_handed_off(self, entries: Sequence[DueEntry], now_ms: int) -> None:
        rows = [
            (e.due_ms, e.shard, minute_of_second(e.second), e.second, e.key, e.due_ms)
            for e in entries
        ]

        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.executemany(
                    "UPDATE due SET handed_off_ms=? WHERE shard=? AND minute=? AND second=?"
                    " AND task_key=? AND due_ms=?",
                    rows,
                )

        if rows:
            await self._db.run(work)

    async def finish_attempt(
        self, namespace: str, task_id: str, attempt: int, transition: Transition, now_ms: int
    ) -> Task | None:
        def work(conn: sqlite3.Connection) -> Task | None:
            with Transaction(conn):
                task = fetch_task(conn, namespace, task_id)
                if task.state is not TaskState.DISPATCHED or task.attempt != attempt:
                    return None
                updated = apply_transition(task, transition, now_ms)
                save_task(conn, updated)
                if updated.state is TaskState.SCHEDULED:
                    insert_due(conn, updated.entry())
                return updated

        return await self._db.run(work)

    async def succeed_many(self, entries: Sequence[DueEntry], now_ms: int) -> list[bool]:
        def work(conn: sqlite3.Connection) -> list[bool]:
            with Transaction(conn):
                return [_succeed(conn, e, now_ms) for e in entries]

        return await self._db.run(work)

    async def redrive(self, namespace: str, task_id: str, now_ms: int) -> Task:
        def work(conn: sqlite3.Connection) -> Task:
            with Transaction(conn):
                task = fetch_task(conn, namespace, task_id)
                require_dead_lettered(task)
                again = task.evolve(
                    state=TaskState.SCHEDULED, attempt=1, due_ms=now_ms, updated_ms=now_ms
                )
                save_task(conn, again)
                insert_due(conn, again.entry())
                return again

        return await self._db.run(work)

    async def purge_dead_letter(self, namespace: str, task_id: str) -> Task:
        def work(conn: sqlite3.Connection) -> Task:
            with Transaction(conn):
                task = fetch_task(conn, namespace, task_id)
                require_dead_lettered(task)
                conn.execute(
                    "DELETE FROM tasks WHERE namespace = ? AND task_id = ?", (namespace, task_id)
                )
                return task

        return await self._db.run(work)

    async def move_due(
        self, namespace: str, task_id: str, *, attempt: int, due_ms: int, to_ms: int, now_ms: int
    ) -> Task | None:
        def work(conn: sqlite3.Connection) -> Task | None:
            with Transaction(conn):
                task = fetch_task(conn, namespace, task_id)
                if (task.state, task.attempt, task.due_ms) != (
                    TaskState.SCHEDULED,
                    attempt,
                    due_ms,
                ):
                    return None
                return move_in(conn, task, task.evolve(due_ms=to_ms, updated_ms=now_ms))

        return await self._db.run(work)

    async def reschedule(
        self, namespace: str, task_id: str, *, to_ms: int, payload: bytes | None, now_ms: int
    ) -> Task:
        def work(conn: sqlite3.Connection) -> Task:
            with Transaction(conn):  # serialised with claims: no half-done move to see
                task = fetch_task(conn, namespace, task_id)
                require_scheduled(task, "rescheduled")
                moved = task.evolve(
                    due_ms=to_ms, updated_ms=now_ms,
                    payload=task.payload if payload is None else payload,
                )  # fmt: skip
                return move_in(conn, task, moved)

        return await self._db.run(work)

    def keep_for(self, namespace: str, seconds: int | None) -> None:
        """Nothing to do: ``prune_finished`` deletes what the retention no longer keeps."""

    async def prune_finished(self, namespace: str, before_ms: int, most: int) -> int:
        return await self._db.run(lambda conn: prune_finished(conn, namespace, before_ms, most))

    async def get_cursors(self) -> dict[int, Cursor]:
        rows = await self._db.run(
            lambda conn: conn.execute("SELECT shard, second, epoch FROM cursors").fetchall()
        )
        return {int(shard): Cursor(int(second), int(epoch)) for shard, second, epoch in rows}

    async def get_cursor(self, shard: int) -> Cursor:
        row = await self._db.run(
            lambda conn: conn.execute(
                "SELECT second, epoch FROM cursors WHERE shard=?", (shard,)
            ).fetchone()
        )
        return Cursor(0, 0) if row is None else Cursor(int(row[0]), int(row[1]))

    async def advance_cursors(self, moves: Mapping[int, Cursor]) -> set[int]:
        def work(conn: sqlite3.Connection) -> set[int]:
            refused = set()
            with Transaction(conn):
                for shard, move in moves.items():
                    if not _move_cursor(conn, shard, move):
                        refused.add(shard)
            return refused

        return await self._db.run(work)

    async def start(self) -> None:
        await self._db.start()

    async def ping(self) -> None:
        await self._db.ping()

    async def close(self) -> None:
        await self._db.close()


def _claim(conn: sqlite3.Connection, e: DueEntry, state: TaskState, now_ms: int) -> bool:
    """Move the entry's task from ``state`` to DISPATCHED if it is still at that attempt."""
    cur = conn.execute(
        "UPDATE tasks SET state=?, updated_ms=? WHERE namespace=? AND task_id=? AND attempt=?"
        " AND due_ms=? AND state=?",
        (int(TaskState.DISPATCHED), now_ms, e.namespace, e.task_id, e.attempt, e.due_ms,
         int(state)),
    )  # fmt: skip
    return cur.rowcount == 1


def _succeed(conn: sqlite3.Connection, e: DueEntry, now_ms: int) -> bool:
    cur = conn.execute(
        "UPDATE tasks SET state=?, updated_ms=? WHERE namespace=? AND task_id=? AND attempt=?"
        " AND due_ms=? AND state=?",
        (int(TaskState.SUCCEEDED), now_ms, e.namespace, e.task_id, e.attempt, e.due_ms,
         int(TaskState.DISPATCHED)),
    )  # fmt: skip
    return cur.rowcount == 1


def _claim_start(conn: sqlite3.Connection, e: DueEntry, claim: str, now_ms: int) -> bool:
    """Claim the start of attempt ``e`` as ``claim`` unless claimed already; whether the
    claim that stands is ``claim``. (The due time is part of the key: a re-drive starts at
    attempt 1 again.)"""
    key = (e.namespace, e.task_id, e.attempt, e.due_ms)
    conn.execute("INSERT OR IGNORE INTO start_claims VALUES (?, ?, ?, ?, ?, ?)",
                 (*key, claim, now_ms))  # fmt: skip
    row = conn.execute(
        "SELECT claim FROM start_claims WHERE namespace=? AND task_id=? AND attempt=? AND due_ms=?",
        key,
    ).fetchone()
    return bool(row[0] == claim)


def _move_cursor(conn: sqlite3.Connection, shard: int, move: Cursor) -> bool:
    current = conn.execute("SELECT second, epoch FROM cursors WHERE shard=?", (shard,)).fetchone()
    if current is not None and int(current[1]) > move.epoch:
        return False
    second = max(move.second, int(current[0])) if current else move.second
    conn.execute("INSERT OR REPLACE INTO cursors VALUES (?, ?, ?)", (shard, second, move.epoch))
    # Whole minute buckets behind the cursor are done; drop them in one range delete.
    conn.execute("DELETE FROM due WHERE shard=? AND minute < ?", (shard, minute_of_second(second)))
    return True
