"""Embedded task store on SQLite, with the due index shaped like the Cassandra table."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from tikk.buckets import DEFAULT_SHARD_COUNT, minute_of_second, second_of, task_key
from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.errors import AlreadyExists, FailedPrecondition, NotFound, TikkError
from tikk.model import (
    START_TIMEOUT,
    Claimed,
    Cursor,
    DeadLetter,
    DueEntry,
    Page,
    RetryPolicy,
    Task,
    TaskState,
    Transition,
    apply_transition,
)
from tikk.paging import decode_token, encode_token
from tikk.store.sqlite.quotas import TASK_USAGE_SCHEMA, count_created
from tikk.store.sqlite.schema import ADDED_COLUMNS, TASKS_SCHEMA
from tikk.store.tasks import DUE_READ_COLUMNS, DUE_WRITE_COLUMNS, TASK_COLUMNS, check_shard_count

_TASK_COLUMNS = ", ".join(TASK_COLUMNS)
_TASK_MARKS = ",".join("?" * len(TASK_COLUMNS))
_DUE_COLUMNS = ", ".join(DUE_READ_COLUMNS)


def _json(mapping: Mapping[str, str]) -> str:
    return json.dumps(dict(mapping)) if mapping else "{}"  # most tasks have none


def task_row(t: Task) -> tuple[object, ...]:
    r = t.retry
    return (
        t.namespace, t.task_id, t.queue, t.handler, t.payload, _json(t.labels),
        r.max_attempts, r.initial_backoff_ms, r.multiplier, r.max_backoff_ms, r.jitter,
        int(t.state), t.attempt, t.due_ms, t.scheduled_ms, t.created_ms, t.updated_ms,
        t.shard, t.fingerprint, t.last_error_type, t.last_error_message,
        _json(t.trace_context), t.schedule_id, t.start_timeout_ms,
    )  # fmt: skip


def _task_from_row(row: Any) -> Task:
    (ns, tid, queue, handler, payload, labels, max_att, init_ms, mult, max_ms, jitter,
     state, attempt, due_ms, sched_ms, created_ms, updated_ms, shard, fp, etype, emsg,
     trace, schedule_id, start_timeout_ms) = row  # fmt: skip
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
        start_timeout_ms=int(start_timeout_ms),
    )  # fmt: skip


def _entry_from_row(row: Any) -> DueEntry:
    (shard, due_ms, ns, tid, attempt, queue, handler, payload, labels, max_att, sched, trace,
     schedule_id, start_timeout_ms, handed_off_ms) = row  # fmt: skip
    return DueEntry(
        shard=int(shard), due_ms=int(due_ms), namespace=str(ns), task_id=str(tid),
        attempt=int(attempt), queue=str(queue), handler=str(handler),
        payload=bytes(payload), labels=json.loads(str(labels)),
        max_attempts=int(max_att), scheduled_ms=int(sched),
        trace_context=json.loads(str(trace)), schedule_id=str(schedule_id),
        start_timeout_ms=int(start_timeout_ms), handed_off=handed_off_ms == due_ms,
    )  # fmt: skip


INSERT_DUE = (
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
# The task file's page cache. Its indexes grow with the tasks stored; at SQLite's default
# (2 MiB) a load of millions re-read index pages from the OS on every batch.
CACHE_MIB = 64
# Ids looked up per statement when a batch of creates checks which exist (SQLite's default
# limit on host parameters is far above this).
_IDS_PER_LOOKUP = 500


def due_row(e: DueEntry) -> tuple[object, ...]:
    return (
        minute_of_second(e.second), e.second, e.key, e.shard, e.due_ms, e.namespace,
        e.task_id, e.attempt, e.queue, e.handler, e.payload, _json(e.labels),
        e.max_attempts, e.scheduled_ms, _json(e.trace_context), e.schedule_id,
        e.start_timeout_ms,
    )  # fmt: skip


def insert_due(conn: sqlite3.Connection, e: DueEntry) -> None:
    conn.execute(INSERT_DUE, due_row(e))


def _delete_due(conn: sqlite3.Connection, t: Task) -> None:
    second = second_of(t.due_ms)
    conn.execute(
        "DELETE FROM due WHERE shard=? AND minute=? AND second=? AND task_key=?",
        (t.shard, minute_of_second(second), second, task_key(t.namespace, t.task_id)),
    )


def _fetch_task(conn: sqlite3.Connection, namespace: str, task_id: str) -> Task:
    row = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks WHERE namespace=? AND task_id=?", (namespace, task_id)
    ).fetchone()
    if row is None:
        raise NotFound(f"task {task_id!r} not found in namespace {namespace!r}")
    return _task_from_row(row)


def _save_task(conn: sqlite3.Connection, t: Task) -> None:
    conn.execute(_SAVE_TASK, task_row(t))


def create_one(conn: sqlite3.Connection, task: Task) -> tuple[Task, bool]:
    [outcome] = create_all(conn, [task])
    if isinstance(outcome, TikkError):
        raise outcome
    return outcome


def create_all(
    conn: sqlite3.Connection, tasks: Sequence[Task], *, new_ids: bool = False
) -> list[tuple[Task, bool] | TikkError]:
    """Create ``tasks`` inside the caller's transaction: one lookup of the ids that exist
    (none for ``new_ids``), then every new task and due row in one statement each; per
    statement, not per row, is where SQLite's time went."""
    if new_ids:
        fresh: Sequence[Task] = tasks
        outcomes: list[tuple[Task, bool] | TikkError] = [(t, True) for t in tasks]
    else:
        fresh, outcomes = _sort_out(tasks, _existing(conn, tasks))
    conn.executemany(INSERT_TASK, [task_row(t) for t in fresh])
    conn.executemany(INSERT_DUE, [due_row(t.entry()) for t in fresh])
    count_created(conn, fresh)
    return outcomes


def _existing(conn: sqlite3.Connection, tasks: Sequence[Task]) -> dict[tuple[str, str], Task]:
    ids: dict[str, list[str]] = {}
    for t in tasks:
        ids.setdefault(t.namespace, []).append(t.task_id)
    found: dict[tuple[str, str], Task] = {}
    for ns, names in ids.items():
        for i in range(0, len(names), _IDS_PER_LOOKUP):
            chunk = names[i : i + _IDS_PER_LOOKUP]
            sql = (
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE namespace=?"
                f" AND task_id IN ({','.join('?' * len(chunk))})"
            )
            for row in conn.execute(sql, [ns, *chunk]):
                task = _task_from_row(row)
                found[(task.namespace, task.task_id)] = task
    return found


def _sort_out(
    tasks: Sequence[Task], stored: dict[tuple[str, str], Task]
) -> tuple[list[Task], list[tuple[Task, bool] | TikkError]]:
    """The tasks to insert, and each task's outcome: an id already stored (or earlier in
    the same batch) is the same task if its fingerprint matches, a conflict otherwise."""
    fresh: list[Task] = []
    outcomes: list[tuple[Task, bool] | TikkError] = []
    for t in tasks:
        prior = stored.get((t.namespace, t.task_id))
        if prior is None:
            stored[(t.namespace, t.task_id)] = t
            fresh.append(t)
            outcomes.append((t, True))
        elif prior.fingerprint != t.fingerprint:
            outcomes.append(AlreadyExists(
                f"task {t.task_id!r} already exists in namespace {t.namespace!r} "
                "with different content"
            ))  # fmt: skip
        else:
            outcomes.append((prior, False))
    return fresh, outcomes


class SqliteTaskStore:
    """``TaskStore`` on one SQLite file (``sqlite:///path``); semantics in ``tikk.store.tasks``."""

    def __init__(self, path: str, shard_count: int = DEFAULT_SHARD_COUNT) -> None:
        schema = TASKS_SCHEMA + TASK_USAGE_SCHEMA
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
        return await self._db.run(lambda conn: _fetch_task(conn, namespace, task_id))

    async def cancel(self, namespace: str, task_id: str, now_ms: int) -> Task:
        def work(conn: sqlite3.Connection) -> Task:
            with Transaction(conn):
                task = _fetch_task(conn, namespace, task_id)
                if task.state is TaskState.CANCELLED:
                    return task
                if task.state is not TaskState.SCHEDULED:
                    raise FailedPrecondition(
                        f"task {task_id!r} is {task.state.name.lower()} and can no longer be "
                        "cancelled"
                    )
                cancelled = task.evolve(state=TaskState.CANCELLED, updated_ms=now_ms)
                _save_task(conn, cancelled)
                _delete_due(conn, task)
                return cancelled

        return await self._db.run(work)

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
        tasks = [_task_from_row(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return Page(tasks, encode_token(tasks[-1].task_id) if more else "")

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
        tasks = [_task_from_row(r) for r in rows[:page_size]]
        if len(rows) <= page_size:
            return Page(tasks)
        return Page(tasks, encode_token(tasks[-1].updated_ms, tasks[-1].task_id))

    async def read_due(
        self, shard: int, after: tuple[int, str], until_second: int, limit: int
    ) -> list[DueEntry]:
        after_second, after_key = after
        if until_second <= after_second - 1:
            return []
        sql = (
            f"SELECT {_DUE_COLUMNS} FROM due WHERE shard=? AND minute BETWEEN ? AND ?"
            " AND (second, task_key) > (?, ?) AND second <= ?"
            " ORDER BY minute, second, task_key LIMIT ?"
        )
        args = (
            shard, minute_of_second(after_second), minute_of_second(until_second),
            after_second, after_key, until_second, limit,
        )  # fmt: skip
        rows = await self._db.run(lambda conn: conn.execute(sql, args).fetchall())
        return [_entry_from_row(r) for r in rows]

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
                    task = _fetch_task(conn, entry.namespace, entry.task_id)
                except NotFound:
                    return None
                if (task.attempt, task.due_ms) != (entry.attempt, entry.due_ms):
                    return None
                if task.state is TaskState.DEAD_LETTERED:
                    return task if task.last_error_type == START_TIMEOUT else None
                if task.state is not TaskState.DISPATCHED:
                    return None
                dead = apply_transition(task, DeadLetter(START_TIMEOUT, reason), now_ms)
                _save_task(conn, dead)
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
                task = _fetch_task(conn, namespace, task_id)
                if task.state is not TaskState.DISPATCHED or task.attempt != attempt:
                    return None
                updated = apply_transition(task, transition, now_ms)
                _save_task(conn, updated)
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
                task = _fetch_task(conn, namespace, task_id)
                if task.state is not TaskState.DEAD_LETTERED:
                    raise FailedPrecondition(
                        f"task {task_id!r} is {task.state.name.lower()}, not dead-lettered"
                    )
                again = task.evolve(
                    state=TaskState.SCHEDULED, attempt=1, due_ms=now_ms, updated_ms=now_ms
                )
                _save_task(conn, again)
                insert_due(conn, again.entry())
                return again

        return await self._db.run(work)

    async def move_due(
        self, namespace: str, task_id: str, *, attempt: int, due_ms: int, to_ms: int, now_ms: int
    ) -> Task | None:
        def work(conn: sqlite3.Connection) -> Task | None:
            with Transaction(conn):
                task = _fetch_task(conn, namespace, task_id)
                if (task.state, task.attempt, task.due_ms) != (
                    TaskState.SCHEDULED,
                    attempt,
                    due_ms,
                ):
                    return None
                moved = task.evolve(due_ms=to_ms, updated_ms=now_ms)
                _delete_due(conn, task)
                _save_task(conn, moved)
                insert_due(conn, moved.entry())
                return moved

        return await self._db.run(work)

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
