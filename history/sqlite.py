"""Embedded run history on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from history.run_history import OCCURRENCE_COLUMNS, RUN_COLUMNS, run_from_row, run_values
from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.errors import NotFound
from tikk.model import Page, RunQuery, RunRecord
from tikk.paging import decode_token, encode_token
from tikk.schedules.model import OccurrenceQuery, OccurrenceRecord, Outcome

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    namespace TEXT NOT NULL,
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    queue TEXT NOT NULL,
    handler TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status INTEGER NOT NULL,
    scheduled_ms INTEGER NOT NULL,
    due_ms INTEGER NOT NULL,
    fired_ms INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    recorded_ms INTEGER,
    worker_id TEXT NOT NULL,
    error_type TEXT NOT NULL,
    error_message TEXT NOT NULL,
    output BLOB NOT NULL,
    idempotency_key TEXT NOT NULL,
    traceback TEXT,
    PRIMARY KEY (namespace, run_id)
);
CREATE TABLE IF NOT EXISTS occurrences (
    namespace TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    nominal_ms INTEGER NOT NULL,
    outcome INTEGER NOT NULL,
    fire_ms INTEGER NOT NULL,
    decided_ms INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (namespace, schedule_id, nominal_ms, outcome)
) WITHOUT ROWID;
"""
# Files made before runs kept the server's time, or a traceback, gain the column (NULL in
# their old rows).
_ADDED_COLUMNS = {"runs": {"recorded_ms": "INTEGER", "traceback": "TEXT"}}
# The time a run is filed under: the server's, or for an old row its finish time. The
# listings' indexes are on this very expression, so a query naming it uses them.
_FILED = "COALESCE(recorded_ms, finished_ms)"
# Run once the column exists (an old file gains it only after the schema script ran): the
# listings by filing time replace those by finish time.
_FILING_INDEXES = (
    f"CREATE INDEX IF NOT EXISTS runs_by_task_filed ON runs (namespace, task_id, {_FILED}, run_id)",
    f"CREATE INDEX IF NOT EXISTS runs_by_queue_filed ON runs (namespace, queue, {_FILED}, run_id)",
    "DROP INDEX IF EXISTS runs_by_task",
    "DROP INDEX IF EXISTS runs_by_queue",
    # What retention deletes: a namespace's oldest runs and occurrences.
    f"CREATE INDEX IF NOT EXISTS runs_by_namespace_filed ON runs (namespace, {_FILED})",
    "CREATE INDEX IF NOT EXISTS occurrences_by_decided ON occurrences (namespace, decided_ms)",
)
_PRUNE_RUNS = (
    f"DELETE FROM runs WHERE rowid IN (SELECT rowid FROM runs WHERE namespace = ?"
    f" AND {_FILED} < ? LIMIT ?)"
)
_PRUNE_OCCURRENCES = (
    "DELETE FROM occurrences WHERE (namespace, schedule_id, nominal_ms, outcome) IN"
    " (SELECT namespace, schedule_id, nominal_ms, outcome FROM occurrences"
    " WHERE namespace = ? AND decided_ms < ? LIMIT ?)"
)
_OCCURRENCE_COLUMNS = ", ".join(OCCURRENCE_COLUMNS)
_COLUMNS = ", ".join(RUN_COLUMNS)


def _occurrence_from_row(row: Any) -> OccurrenceRecord:
    ns, sid, nominal, outcome, fire, decided, task_id, reason = row
    return OccurrenceRecord(
        namespace=str(ns), schedule_id=str(sid), nominal_ms=int(nominal),
        outcome=Outcome(outcome), fire_ms=int(fire), decided_ms=int(decided),
        task_id=str(task_id), reason=str(reason),
    )  # fmt: skip


class SqliteRunHistory:
    """``RunHistory`` on one SQLite file; see ``history.run_history`` for semantics."""

    def __init__(self, path: str) -> None:
        self._db = SqliteRunner(path, SCHEMA, _ADDED_COLUMNS)

    async def append(self, record: RunRecord) -> None:
        await self.append_many([record])

    async def append_many(self, records: Sequence[RunRecord]) -> None:
        marks = ",".join("?" * len(RUN_COLUMNS))
        sql = f"INSERT OR IGNORE INTO runs ({_COLUMNS}) VALUES ({marks})"
        rows = [run_values(r) for r in records]

        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.executemany(sql, rows)

        await self._db.run(work)

    def keep_for(self, namespace: str, seconds: int | None) -> None:
        """Nothing to do: ``prune`` deletes what the namespace's retention no longer keeps."""

    async def prune(self, namespace: str, before_ms: int, most: int) -> int:
        def work(conn: sqlite3.Connection) -> int:
            with Transaction(conn):
                runs = conn.execute(_PRUNE_RUNS, (namespace, before_ms, most)).rowcount
                conn.execute(_PRUNE_OCCURRENCES, (namespace, before_ms, most))
                return int(runs)

        return await self._db.run(work)

    async def get(self, namespace: str, run_id: str) -> RunRecord:
        sql = f"SELECT {_COLUMNS} FROM runs WHERE namespace=? AND run_id=?"
        row = await self._db.run(lambda conn: conn.execute(sql, (namespace, run_id)).fetchone())
        if row is None:
            raise NotFound(f"run {run_id!r} not found in namespace {namespace!r}")
        return run_from_row(row)

    async def list_for_task(
        self, namespace: str, task_id: str, page_size: int, page_token: str
    ) -> Page[RunRecord]:
        return await self._page(
            "namespace=? AND task_id=?", [namespace, task_id], page_size, page_token
        )

    async def list_by_queue(
        self, query: RunQuery, page_size: int, page_token: str
    ) -> Page[RunRecord]:
        where = f"namespace=? AND queue=? AND {_FILED} >= ? AND {_FILED} < ?"
        args: list[object] = [query.namespace, query.queue, query.start_ms, query.end_ms]
        if query.status is not None:
            where += " AND status=?"
            args.append(int(query.status))
        return await self._page(where, args, page_size, page_token)

    async def _page(
        self, where: str, args: list[object], page_size: int, page_token: str
    ) -> Page[RunRecord]:
        after = decode_token(page_token, (int, str))
        if after:
            where += f" AND ({_FILED}, run_id) < (?, ?)"
            args = [*args, *after]
        sql = (
            f"SELECT {_COLUMNS} FROM runs WHERE {where} ORDER BY {_FILED} DESC, run_id DESC LIMIT ?"
        )

        def work(conn: sqlite3.Connection) -> list[Any]:
            return conn.execute(sql, [*args, page_size + 1]).fetchall()

        rows = await self._db.run(work)
        records = [run_from_row(r) for r in rows[:page_size]]
        if len(rows) <= page_size:
            return Page(records)
        return Page(records, encode_token(records[-1].recorded_ms, records[-1].run_id))

    async def record_occurrences(self, records: Sequence[OccurrenceRecord]) -> None:
        rows = [
            (r.namespace, r.schedule_id, r.nominal_ms, int(r.outcome), r.fire_ms, r.decided_ms,
             r.task_id, r.reason)
            for r in records
        ]  # fmt: skip
        sql = (
            f"INSERT OR IGNORE INTO occurrences ({_OCCURRENCE_COLUMNS})"
            f" VALUES ({','.join('?' * len(OCCURRENCE_COLUMNS))})"
        )

        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.executemany(sql, rows)

        await self._db.run(work)

    async def list_occurrences(
        self, query: OccurrenceQuery, page_size: int, page_token: str
    ) -> Page[OccurrenceRecord]:
        where = "namespace=? AND schedule_id=? AND nominal_ms >= ? AND nominal_ms < ?"
        args: list[object] = [query.namespace, query.schedule_id, query.start_ms, query.end_ms]
        if query.outcome is not None:
            where += " AND outcome=?"
            args.append(int(query.outcome))
        after = decode_token(page_token, (int, int))
        if after:
            where += " AND (nominal_ms, outcome) < (?, ?)"
            args += after
        sql = (
            f"SELECT {_OCCURRENCE_COLUMNS} FROM occurrences WHERE {where}"
            " ORDER BY nominal_ms DESC, outcome DESC LIMIT ?"
        )
        rows = await self._db.run(lambda conn: conn.execute(sql, [*args, page_size + 1]).fetchall())
        records = [_occurrence_from_row(r) for r in rows[:page_size]]
        if len(rows) <= page_size:
            return Page(records)
        last = records[-1]
        return Page(records, encode_token(last.nominal_ms, int(last.outcome)))

    async def start(self) -> None:
        await self._db.start()

        def file_by_recorded_time(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                for statement in _FILING_INDEXES:
                    conn.execute(statement)

        await self._db.run(file_by_recorded_time)

    async def ping(self) -> None:
        await self._db.ping()

    async def close(self) -> None:
        await self._db.close()
