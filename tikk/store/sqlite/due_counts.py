"""Due counts on SQLite, in the task store's file; semantics in ``tikk.store.due_counts``."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.store.due_counts import DueCount, DueDeltas

DUE_COUNTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS due_counts (
    namespace TEXT NOT NULL,
    minute INTEGER NOT NULL,
    queue TEXT NOT NULL,
    tasks INTEGER NOT NULL,
    PRIMARY KEY (namespace, minute, queue)
) WITHOUT ROWID;
"""
_ADD = (
    "INSERT INTO due_counts (namespace, minute, queue, tasks) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (namespace, minute, queue) DO UPDATE SET tasks = tasks + excluded.tasks"
)
_READ = (
    "SELECT minute, queue, tasks FROM due_counts WHERE namespace = ? AND minute BETWEEN ? AND ?"
    " AND tasks > 0 ORDER BY minute, queue"
)


class SqliteDueCountStore:
    """``DueCountStore`` on the task store's SQLite file (``sqlite:///path``)."""

    def __init__(self, path: str) -> None:
        self._db = SqliteRunner(path, DUE_COUNTS_SCHEMA, {})

    async def add(self, deltas: DueDeltas) -> None:
        rows = [(ns, minute, queue, d) for (ns, minute, queue), d in deltas.items() if d]

        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.executemany(_ADD, rows)

        if rows:
            await self._db.run(work)

    async def counts(
        self, namespace: str, first_minute: int, last_minute: int
    ) -> Sequence[DueCount]:
        def work(conn: sqlite3.Connection) -> list[DueCount]:
            found = conn.execute(_READ, (namespace, first_minute, last_minute)).fetchall()
            return [DueCount(int(m), str(q), int(n)) for m, q, n in found]

        return await self._db.run(work)

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()
