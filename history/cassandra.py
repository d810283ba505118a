"""Run history on Cassandra: append-only time series, never updated in place.

Tables: ``runs`` by run id; ``runs_by_task`` (partition = task, newest first);
``runs_by_queue`` (partition = (namespace, queue, hour recorded), newest first) for the
time-range queries. The listings are clustered by the time the server recorded the run
(``recorded_ms``), not by the worker's finish time. Every row carries a TTL
(``HISTORY_RETENTION_S``) and the time-bucketed tables use TimeWindowCompactionStrategy, so
whole SSTables expire together instead of being rewritten by compaction: the usual layout for
append-only time series.

A run reported again (a lost acknowledgement) carries the time of its first recording, read
back from its ``runs`` row, and so rewrites the same primary keys with the same values: one
record. That row is written before the listings' rows: a repeat that finds no row therefore
finds no listing row either, and files the run once under its own time.

In the listings the clustering column keeps the name it was created with, ``finished_ms``,
and holds the server's time, with the worker's finish time beside it in
``worker_finished_ms`` (``_LISTED``): Cassandra cannot re-key a table in place, and a rename of
the column cannot be run again (5.0 refuses ``RENAME IF EXISTS`` of a column renamed already),
so a migration interrupted half-way would stop every later one. Rows written before kept
their finish time there, stay filed where they were, and read back with it as both times
(``run_from_row``); so do rows an older release still writes during an upgrade.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from history.run_history import OCCURRENCE_COLUMNS, RUN_COLUMNS, run_from_row, run_values
from tikk.drivers.cassandra import MAX_TTL_S, CassandraSession
from tikk.drivers.cassandra_batches import MAX_BATCH_PARTITIONS, PartitionRow
from tikk.drivers.cassandra_schema import Migration
from tikk.errors import NotFound
from tikk.model import Page, RunQuery, RunRecord
from tikk.paging import decode_token, encode_token
from tikk.schedules.model import OccurrenceQuery, OccurrenceRecord, Outcome
from tikk.settings import DAY_MS

HISTORY_RETENTION_S = 30 * 86_400
_HOUR_MS = 3_600_000
_COLS = ", ".join(RUN_COLUMNS)
_RUN_COLUMNS_CQL = (
    "namespace text, run_id text, task_id text, queue text, handler text, attempt int, "
    "status int, scheduled_ms bigint, due_ms bigint, fired_ms bigint, started_ms bigint, "
    "finished_ms bigint, worker_id text, error_type text, error_message text, output blob, "
    "idempotency_key text"
)
_TWCS = (
    "compaction = {'class': 'TimeWindowCompactionStrategy', "
    "'compaction_window_unit': 'DAYS', 'compaction_window_size': 1}"
)
HISTORY_MIGRATIONS = [
    Migration("history", 1, "runs by id, by task, by queue and hour", [
        f"CREATE TABLE IF NOT EXISTS runs ({_RUN_COLUMNS_CQL}, PRIMARY KEY ((namespace, run_id)))"
        f" WITH default_time_to_live = {HISTORY_RETENTION_S}",
        f"CREATE TABLE IF NOT EXISTS runs_by_task ({_RUN_COLUMNS_CQL},"
        " PRIMARY KEY ((namespace, task_id), finished_ms, run_id))"
        " WITH CLUSTERING ORDER BY (finished_ms DESC, run_id DESC)"
        f" AND default_time_to_live = {HISTORY_RETENTION_S}",
        f"CREATE TABLE IF NOT EXISTS runs_by_queue ({_RUN_COLUMNS_CQL}, hour bigint,"
        " PRIMARY KEY ((namespace, queue, hour), finished_ms, run_id))"
        " WITH CLUSTERING ORDER BY (finished_ms DESC, run_id DESC)"
        f" AND default_time_to_live = {HISTORY_RETENTION_S} AND {_TWCS}",
    ]),
    Migration("history", 2, "schedule occurrences by schedule and day", [
        "CREATE TABLE IF NOT EXISTS schedule_occurrences (namespace text, schedule_id text,"
        " day bigint, nominal_ms bigint, outcome int, fire_ms bigint, decided_ms bigint,"
        " task_id text, reason text,"
        " PRIMARY KEY ((namespace, schedule_id, day), nominal_ms, outcome))"
        " WITH CLUSTERING ORDER BY (nominal_ms DESC, outcome DESC)"
        f" AND default_time_to_live = {HISTORY_RETENTION_S}",
    ]),
    # The listings' clustering column (named finished_ms) holds the server's time from now on:
    # see the module.
    Migration("history", 3, "runs filed by the time the server recorded them", [
        "ALTER TABLE runs ADD IF NOT EXISTS recorded_ms bigint",
        "ALTER TABLE runs_by_task ADD IF NOT EXISTS worker_finished_ms bigint",
        "ALTER TABLE runs_by_queue ADD IF NOT EXISTS worker_finished_ms bigint",
    ]),
    Migration("history", 4, "a failed run's traceback", [
        f"ALTER TABLE {table} ADD IF NOT EXISTS traceback text"
        for table in ("runs", "runs_by_task", "runs_by_queue")
    ]),
]  # fmt: skip
_OCC_COLS = ", ".join(OCCURRENCE_COLUMNS)
INSERT_OCCURRENCE = (
    f"INSERT INTO schedule_occurrences ({_OCC_COLS}, day)"
    f" VALUES ({', '.join('?' * (len(OCCURRENCE_COLUMNS) + 1))})"
)
SELECT_OCCURRENCES = (
    f"SELECT {_OCC_COLS} FROM schedule_occurrences WHERE namespace = ? AND schedule_id = ?"
    " AND day = ? AND (nominal_ms, outcome) < (?, ?) AND nominal_ms >= ? LIMIT ?"
)
_MARKS = ", ".join("?" * len(RUN_COLUMNS))
# A run's fields in the listings' columns, in ``RUN_COLUMNS`` order (see the module): the
# server's time in the clustering column ``finished_ms``, the worker's beside it.
_LISTED = {"finished_ms": "worker_finished_ms", "recorded_ms": "finished_ms"}
_LISTED_COLS = ", ".join(_LISTED.get(c, c) for c in RUN_COLUMNS)
INSERT_RUN = f"INSERT INTO runs ({_COLS}) VALUES ({_MARKS}) USING TTL ?"
INSERT_RUN_BY_TASK = f"INSERT INTO runs_by_task ({_LISTED_COLS}) VALUES ({_MARKS}) USING TTL ?"
INSERT_RUN_BY_QUEUE = (
    f"INSERT INTO runs_by_queue ({_LISTED_COLS}, hour) VALUES ({_MARKS}, ?) USING TTL ?"
)
SELECT_RUN = f"SELECT {_COLS} FROM runs WHERE namespace = ? AND run_id = ?"
# ``finished_ms`` in these two is the time the server recorded the run.
SELECT_RUNS_BY_TASK = (
    f"SELECT {_LISTED_COLS} FROM runs_by_task WHERE namespace = ? AND task_id = ?"
    " AND (finished_ms, run_id) < (?, ?) LIMIT ?"
)
SELECT_RUNS_BY_QUEUE = (
    f"SELECT {_LISTED_COLS} FROM runs_by_queue WHERE namespace = ? AND queue = ? AND hour = ?"
    " AND (finished_ms, run_id) < (?, ?) AND finished_ms >= ? LIMIT ?"
)
_TOP = (2**62, "")
# Reads one listing call makes at most (a read per hour of runs, per day of occurrences, or
# per page_size rows a status filter passed over): a sparse range ends the call with a
# shorter page and a token to go on from, so no call's cost grows with the span asked for.
READS_PER_CALL = 48


def _occurrence(row: Any) -> OccurrenceRecord:
    return OccurrenceRecord(
        namespace=row.namespace, schedule_id=row.schedule_id, nominal_ms=row.nominal_ms,
        outcome=Outcome(row.outcome), fire_ms=row.fire_ms, decided_ms=row.decided_ms,
        task_id=row.task_id or "", reason=row.reason or "",
    )  # fmt: skip


class CassandraRunHistory:
    """``RunHistory`` on a keyspace; ``session`` may be shared with the stores of the keyspace."""

    def __init__(self, session: CassandraSession) -> None:
        self._db = session
        # Namespaces whose runs are kept other than HISTORY_RETENTION_S (``keep_for``).
        self._kept_s: dict[str, int] = {}

    def keep_for(self, namespace: str, seconds: int | None) -> None:
        if seconds is None:
            self._kept_s.pop(namespace, None)
        else:
            self._kept_s[namespace] = max(1, min(MAX_TTL_S, seconds))

    async def start(self) -> None:
        await self._db.start()

    async def ping(self) -> None:
        await self._db.ping("history")

    async def append(self, record: RunRecord) -> None:
        await self.append_many([record])

    async def append_many(self, records: Sequence[RunRecord]) -> None:
        # Unlogged: the three rows of a run are idempotent copies, and a run is acknowledged
        # to the worker only after this returns, so a partial write is repeated, never lost.
        # The rows of one queue and hour share a partition and go in one batch. The runs'
        # own rows go first (see the module: a repeat reads its time from them).
        by_id: list[PartitionRow] = []
        listed: list[PartitionRow] = []
        for r in records:
            ttl = self._kept_s.get(r.namespace, HISTORY_RETENTION_S)
            values = run_values(r)
            size = 200 + len(r.output) + len(r.error_message) + len(r.traceback)
            hour = r.recorded_ms // _HOUR_MS
            run = ("run", r.namespace, r.run_id)
            by_id.append(PartitionRow(run, INSERT_RUN, [*values, ttl], size))
            listed += [
                PartitionRow(("task", r.namespace, r.task_id), INSERT_RUN_BY_TASK,
                             [*values, ttl], size),
                PartitionRow(("queue", r.namespace, r.queue, hour), INSERT_RUN_BY_QUEUE,
                             [*values, hour, ttl], size),
            ]  # fmt: skip
        packed = MAX_BATCH_PARTITIONS  # a partition's rows together, a few per request
        await self._db.execute_many(self._db.partition_batches(by_id, packed))
        await self._db.execute_many(self._db.partition_batches(listed, packed))

    async def prune(self, namespace: str, before_ms: int, most: int) -> int:
        return 0  # every row carries a TTL: the namespace's retention (``keep_for``) or 30 days

    async def get(self, namespace: str, run_id: str) -> RunRecord:
        rows = await self._db.execute(SELECT_RUN, [namespace, run_id])
        if not rows:
            raise NotFound(f"run {run_id!r} not found in namespace {namespace!r}")
        return run_from_row(rows[0])

    async def list_for_task(
        self, namespace: str, task_id: str, page_size: int, page_token: str
    ) -> Page[RunRecord]:
        after = decode_token(page_token, (int, str))
        start = (int(after[0]), str(after[1])) if after else _TOP
        rows = await self._db.execute(
            SELECT_RUNS_BY_TASK, [namespace, task_id, *start, page_size + 1]
        )
        records = [run_from_row(r) for r in rows[:page_size]]
        if len(rows) <= page_size:
            return Page(records)
        return Page(records, encode_token(records[-1].recorded_ms, records[-1].run_id))

    async def list_by_queue(
        self, query: RunQuery, page_size: int, page_token: str
    ) -> Page[RunRecord]:
        after = decode_token(page_token, (int, int, str))
        if after:
            hour, before = int(after[0]), (int(after[1]), str(after[2]))
        else:
            hour, before = (query.end_ms - 1) // _HOUR_MS, (query.end_ms, "")
        found: list[RunRecord] = []
        for _ in range(READS_PER_CALL):
            if hour < query.start_ms // _HOUR_MS:
                break
            params = [query.namespace, query.queue, hour, *before, query.start_ms, page_size]
            rows = await self._db.execute(SELECT_RUNS_BY_QUEUE, params)
            for row in rows:
                record = run_from_row(row)
                before = (record.recorded_ms, record.run_id)
                if query.status is None or record.status is query.status:
                    found.append(record)
                if len(found) == page_size:
                    return Page(found, encode_token(hour, *before))
            if len(rows) < page_size:
                hour, before = hour - 1, _TOP
        more = hour >= query.start_ms // _HOUR_MS
        return Page(found, encode_token(hour, *before) if more else "")

    async def record_occurrences(self, records: Sequence[OccurrenceRecord]) -> None:
        # Independent idempotent rows (a replay rewrites the same keys): written concurrently.
        await asyncio.gather(
            *(
                self._db.execute(INSERT_OCCURRENCE, [
                    r.namespace, r.schedule_id, r.nominal_ms, int(r.outcome), r.fire_ms,
                    r.decided_ms, r.task_id, r.reason, r.nominal_ms // DAY_MS,
                ])
                for r in records
            )
        )  # fmt: skip

    async def list_occurrences(
        self, query: OccurrenceQuery, page_size: int, page_token: str
    ) -> Page[OccurrenceRecord]:
        """Walks the day buckets of the range from its end back to its start."""
        after = decode_token(page_token, (int, int, int))
        if after:
            day, before = int(after[0]), (int(after[1]), int(after[2]))
        else:
            day, before = (query.end_ms - 1) // DAY_MS, (query.end_ms, 0)
        found: list[OccurrenceRecord] = []
        for _ in range(READS_PER_CALL):
            if day < query.start_ms // DAY_MS:
                break
            params = [query.namespace, query.schedule_id, day, *before, query.start_ms, page_size]
            rows = await self._db.execute(SELECT_OCCURRENCES, params)
            for row in rows:
                record = _occurrence(row)
                before = (record.nominal_ms, int(record.outcome))
                if query.outcome is None or record.outcome is query.outcome:
                    found.append(record)
                if len(found) == page_size:
                    return Page(found, encode_token(day, *before))
            if len(rows) < page_size:
                day, before = day - 1, (2**62, 0)
        more = day >= query.start_ms // DAY_MS
        return Page(found, encode_token(day, *before) if more else "")

    async def close(self) -> None:
        await self._db.close()
