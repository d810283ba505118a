"""Embedded schedule store on the task store's SQLite file; semantics in ``tikk.store.schedules``.

It opens its own connection to the same file, so a step (occurrence tasks, next tick, schedule
row) is one SQLite transaction across the task and schedule tables.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.errors import AlreadyExists, Conflict, NotFound
from tikk.model import Page, Task
from tikk.paging import decode_token, encode_token
from tikk.schedules.codec import decode_schedule, encode_schedule
from tikk.schedules.model import Schedule
from tikk.store.schedules import StepWrite
from tikk.store.sqlite.quotas import TASK_USAGE_SCHEMA
from tikk.store.sqlite.schema import (
    ADDED_COLUMNS,
    SCHEDULES_SCHEMA,
    TASK_LABELS_SCHEMA,
    TASKS_SCHEMA,
)
from tikk.store.sqlite.task_creates import create_one
from tikk.store.sqlite.task_rows import insert_due


def _fetch(conn: sqlite3.Connection, namespace: str, schedule_id: str) -> Schedule | None:
    row = conn.execute(
        "SELECT version, body FROM schedules WHERE namespace=? AND schedule_id=?",
        (namespace, schedule_id),
    ).fetchone()
    if row is None:
        return None
    return decode_schedule(namespace, schedule_id, int(row[0]), str(row[1]))


def _must_fetch(conn: sqlite3.Connection, namespace: str, schedule_id: str) -> Schedule:
    found = _fetch(conn, namespace, schedule_id)
    if found is None:
        raise NotFound(f"schedule {schedule_id!r} not found in namespace {namespace!r}")
    return found


def _write(conn: sqlite3.Connection, s: Schedule) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO schedules VALUES (?, ?, ?, ?, ?)",
        (s.namespace, s.schedule_id, s.version, s.fingerprint, encode_schedule(s)),
    )
    tick = s.tick()
    if tick is not None:
        insert_due(conn, tick)


def _create_tasks(conn: sqlite3.Connection, tasks: Sequence[Task]) -> None:
    for task in tasks:
        try:
            create_one(conn, task)
        except AlreadyExists:
            # Same occurrence with another action (the schedule was updated after it ran):
            # the occurrence already has its task, which stays as it is.
            continue


def _step(conn: sqlite3.Connection, st: StepWrite) -> bool:
    s = st.schedule
    current = _fetch(conn, s.namespace, s.schedule_id)
    if current is None or current.version != st.expected_version:
        return False
    _create_tasks(conn, st.tasks)
    _write(conn, s.evolve(version=st.expected_version + 1))
    return True


class SqliteScheduleStore:
    """``ScheduleStore`` on the SQLite file of ``SqliteTaskStore`` (same path)."""

    def __init__(self, path: str) -> None:
        schema = TASKS_SCHEMA + TASK_USAGE_SCHEMA + TASK_LABELS_SCHEMA + SCHEDULES_SCHEMA
        self._db = SqliteRunner(path, schema, ADDED_COLUMNS)

    async def create(self, schedule: Schedule) -> tuple[Schedule, bool]:
        def work(conn: sqlite3.Connection) -> tuple[Schedule, bool]:
            with Transaction(conn):
                existing = _fetch(conn, schedule.namespace, schedule.schedule_id)
                if existing is None:
                    stored = schedule.evolve(version=1)
                    _write(conn, stored)
                    return stored, True
                if existing.fingerprint != schedule.fingerprint:
                    raise AlreadyExists(
                        f"schedule {schedule.schedule_id!r} already exists in namespace "
                        f"{schedule.namespace!r} with different content"
                    )
                return existing, False

        return await self._db.run(work)

    async def get(self, namespace: str, schedule_id: str) -> Schedule:
        return await self._db.run(lambda conn: _must_fetch(conn, namespace, schedule_id))

    async def list(self, namespace: str, page_size: int, page_token: str) -> Page[Schedule]:
        after = decode_token(page_token, (str,))
        after_id = str(after[0]) if after else ""
        rows = await self._db.run(
            lambda conn: conn.execute(
                "SELECT schedule_id, version, body FROM schedules WHERE namespace=?"
                " AND schedule_id>? ORDER BY schedule_id LIMIT ?",
                (namespace, after_id, page_size + 1),
            ).fetchall()
        )
        items = [
            decode_schedule(namespace, str(r[0]), int(r[1]), str(r[2])) for r in rows[:page_size]
        ]
        more = len(rows) > page_size
        return Page(items, encode_token(items[-1].schedule_id) if more else "")

    async def replace(self, schedule: Schedule, expected_version: int) -> Schedule:
        def work(conn: sqlite3.Connection) -> Schedule:
            with Transaction(conn):
                current = _must_fetch(conn, schedule.namespace, schedule.schedule_id)
                if current.version != expected_version:
                    raise Conflict(
                        f"schedule {schedule.schedule_id!r} is at version {current.version}, "
                        f"not {expected_version}"
                    )
                stored = schedule.evolve(version=expected_version + 1)
                _write(conn, stored)
                return stored

        return await self._db.run(work)

    async def delete(self, namespace: str, schedule_id: str, expected_version: int | None) -> None:
        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                current = _must_fetch(conn, namespace, schedule_id)
                if expected_version is not None and current.version != expected_version:
                    raise Conflict(
                        f"schedule {schedule_id!r} is at version {current.version}, "
                        f"not {expected_version}"
                    )
                conn.execute(
                    "DELETE FROM schedules WHERE namespace=? AND schedule_id=?",
                    (namespace, schedule_id),
                )

        await self._db.run(work)

    async def step(self, schedule: Schedule, expected_version: int, tasks: Sequence[Task]) -> bool:
        [done] = await self.step_many([StepWrite(schedule, expected_version, tasks)])
        return done

    async def get_many(self, keys: Sequence[tuple[str, str]]) -> Sequence[Schedule | None]:
        return await self._db.run(lambda conn: [_fetch(conn, ns, sid) for ns, sid in keys])

    async def step_many(self, steps: Sequence[StepWrite]) -> Sequence[bool]:
        def work(conn: sqlite3.Connection) -> list[bool]:
            # One transaction for all: a commit per schedule would bound the rate.
            with Transaction(conn):
                return [_step(conn, st) for st in steps]

        return await self._db.run(work)

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()
