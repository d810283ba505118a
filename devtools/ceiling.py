"""The bare-driver ceiling: how fast the database driver alone writes the rows tikk writes for
the same tasks, measured in the benchmark's run, so tikk's ingest can be given as a share of it.

The tasks are the benchmark's own (``bench_load.task_requests``), turned into rows by the
server's validation, and written with the store's own statements and schema, imported rather
than copied so both sides keep writing the same rows:

* **SQLite**: plain ``sqlite3`` with the store's pragmas, its schema and its insert
  statements (``INSERT_TASK``, ``INSERT_DUE``), one ``executemany`` per table in
  transactions of ``_SQLITE_TX`` tasks, into a scratch file.
* **Cassandra**: the driver's ``execute_async`` with ``_CQL_CONCURRENCY`` requests in flight,
  writing the rows of a server-assigned-id create (task row, due row, listing); rows sharing
  a partition go in one unlogged batch. The keyspace is a scratch one created by
  the project's migrations and dropped afterwards.

Only the writes are timed: building the rows is the same work for both and not the driver's.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.bench_load import Spread, task_requests
from server.api.validation import create_task
from tikk.model import Task
from tikk.settings import Limits

_CHUNK = 10_000
_SQLITE_TX = 10_000
_CQL_CONCURRENCY = 256
# Rows per unlogged batch of one partition: a due row weighs about 250 bytes, so this stays
# under the 50 KiB Cassandra refuses by default (the store splits by bytes, to the same end).
_CQL_BATCH_ROWS = 150
REPLICATION = "{'class': 'SimpleStrategy', 'replication_factor': 1}"


@dataclass(frozen=True)
class CeilingResult:
    method: str
    tasks: int
    seconds: float  # spent in the driver's writes

    @property
    def per_s(self) -> float:
        return self.tasks / self.seconds if self.seconds else 0.0


def task_chunks(n: int, spread: Spread, queue: str, shards: int) -> Iterator[list[Task]]:
    """The tasks of a load as the server would build them, ``_CHUNK`` at a time."""
    limits = Limits()
    for start in range(0, n, _CHUNK):
        now_ms = int(time.time() * 1000)
        requests = task_requests(start, min(n, start + _CHUNK), spread, queue)
        yield [create_task(r, limits, shards, now_ms) for r in requests]


def sqlite_ceiling(path: Path, n: int, spread: Spread, queue: str, shards: int) -> CeilingResult:
    """Write ``n`` tasks into a fresh SQLite file at ``path``, the way the store does."""
    from tikk.drivers.sqlite import PRAGMAS
    from tikk.store.sqlite.schema import TASKS_SCHEMA
    from tikk.store.sqlite.task_rows import INSERT_TASK, REPLACE_DUE, due_row, task_row
    from tikk.store.sqlite.tasks import CACHE_MIB

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        # The store's settings, so durability and caching are the same on both sides.
        for pragma in PRAGMAS:
            conn.execute(pragma)
        conn.execute(f"PRAGMA cache_size=-{CACHE_MIB * 1024}")
        conn.executescript(TASKS_SCHEMA)
        spent = 0.0
        for chunk in task_chunks(n, spread, queue, shards):
            began = time.perf_counter()
            for first in range(0, len(chunk), _SQLITE_TX):
                tasks = chunk[first : first + _SQLITE_TX]
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(INSERT_TASK, [task_row(t) for t in tasks])
                conn.executemany(REPLACE_DUE, [due_row(t.entry()) for t in tasks])
                conn.execute("COMMIT")
            spent += time.perf_counter() - began
    finally:
        conn.close()
    return CeilingResult("sqlite3, store schema and inserts", n, spent)


def cassandra_ceiling(
    n: int, spread: Spread, queue: str, shards: int, *, host: str, port: int
) -> CeilingResult:
    """Write ``n`` tasks into a scratch keyspace (dropped afterwards) with the bare driver."""
    from devtools.stack import login
    from tikk.drivers.cassandra import CassandraConfig, CassandraSession
    from tikk.drivers.cassandra_schema import run_migrations
    from tikk.store.cassandra.schema import STORE_MIGRATIONS

    keyspace = f"tikk_ceiling_{uuid.uuid4().hex[:8]}"
    # The stack's login (if authenticated) comes with its URL.
    db = CassandraSession(CassandraConfig.from_url(login(f"cassandra://{host}:{port}/{keyspace}")))
    db.connect()
    try:
        run_migrations(db, STORE_MIGRATIONS, REPLICATION)
        spent = sum(write_chunk(db, chunk) for chunk in task_chunks(n, spread, queue, shards))
    finally:
        try:
            db.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        finally:
            db.shutdown()
    return CeilingResult("cassandra-driver, execute_async, unlogged batches", n, spent)


def write_chunk(db: Any, chunk: list[Task]) -> float:
    """Write one chunk's rows; the seconds the driver took."""
    from cassandra.concurrent import execute_concurrent

    statements = [(batch, None) for batch in _cql_batches(db, chunk)]
    began = time.perf_counter()
    execute_concurrent(db.session, statements, concurrency=_CQL_CONCURRENCY)
    return time.perf_counter() - began


def _cql_batches(db: Any, chunk: list[Task]) -> list[Any]:
    """Unlogged batches of the chunk's rows, each on one partition."""
    from cassandra.query import BatchStatement, BatchType

    from tikk.store.cassandra.task_creates import CREATE_NEW_TASK
    from tikk.store.cassandra.task_rows import (
        INSERT_DUE,
        INSERT_TASK_BY_QUEUE,
        due_values,
        task_values,
    )

    partitions: dict[tuple[Any, ...], list[tuple[Any, list[Any]]]] = defaultdict(list)
    create = db.prepare(CREATE_NEW_TASK)
    due, listing = db.prepare(INSERT_DUE), db.prepare(INSERT_TASK_BY_QUEUE)
    for t in chunk:
        ttl = _task_ttl(t)
        partitions[("task", t.namespace, t.task_id)].append((create, [*task_values(t), ttl]))
        values = due_values(t.entry(), t.created_ms)
        partitions[("due", t.shard, values[0])].append((due, values))
        partitions[("queue", t.namespace, t.queue, t.shard)].append(
            (listing, [t.namespace, t.queue, t.shard, t.task_id, ttl])
        )
    batches: list[Any] = []
    for rows in partitions.values():
        if len(rows) == 1:  # a lone row goes as itself, as a batch of one costs more
            batches.append(rows[0][0].bind(rows[0][1]))
            continue
        for first in range(0, len(rows), _CQL_BATCH_ROWS):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for statement, params in rows[first : first + _CQL_BATCH_ROWS]:
                batch.add(statement, params)
            batches.append(batch)
    return batches


def _task_ttl(t: Task) -> int:
    """The task row's TTL as the store sets it: its retention after the due time."""
    from tikk.store.cassandra.schema import TASK_RETENTION_S
    from tikk.store.cassandra.task_rows import ttl_after

    return ttl_after(t.due_ms, t.created_ms, TASK_RETENTION_S)
