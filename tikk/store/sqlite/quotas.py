"""Quota store on SQLite, in the task store's file; semantics in ``tikk.store.quotas``.

Usage is exact: each namespace's unfinished tasks are counted in the transaction that writes
the task rows. Creates count a batch at once (``count_created``: one upsert per namespace and
batch, so bulk loads pay nearly nothing); every later change of state, whichever connection
or process writes it, is counted by triggers on the task table. Every opener of the file
(task, schedule and quota stores) creates them (``TASK_USAGE_SCHEMA``), so no task changes
before they exist; a file whose tasks predate them is counted once, when they are created.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence

from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.model import Task, TaskState
from tikk.quotas import QUOTA_NAMES, NamespaceQuotas, NamespaceUsage
from tikk.store.quotas import OpenCount
from tikk.store.sqlite.schema import ADDED_COLUMNS, TASK_LABELS_SCHEMA, TASKS_SCHEMA

_OPEN = ",".join(str(int(s)) for s in TaskState if not s.finished)


def _count(sign: str, row: str) -> str:
    return (
        f"INSERT INTO task_usage (namespace, open_tasks) VALUES ({row}.namespace, {sign}1)"
        f" ON CONFLICT (namespace) DO UPDATE SET open_tasks = open_tasks {sign} 1;"
    )


# A row per namespace that ever had a task. The triggers fire per task row; their cost is one
# upsert on this small table, in the page cache. The tasks already in a file are counted
# once: the seed trigger runs only when the marker row is inserted, not on every open (an
# ignored insert fires no trigger), so opening a file of millions scans nothing.
TASK_USAGE_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS task_usage (
    namespace TEXT PRIMARY KEY,
    open_tasks INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS task_usage_seed AFTER INSERT ON store_meta
    WHEN NEW.key = 'task_usage'
    BEGIN
        INSERT INTO task_usage (namespace, open_tasks)
            SELECT namespace, count(*) FROM tasks WHERE state IN ({_OPEN}) GROUP BY namespace;
    END;
INSERT OR IGNORE INTO store_meta VALUES ('task_usage', 'counted');
CREATE TRIGGER IF NOT EXISTS task_usage_delete AFTER DELETE ON tasks
    WHEN OLD.state IN ({_OPEN})
    BEGIN {_count("-", "OLD")} END;
CREATE TRIGGER IF NOT EXISTS task_usage_finish AFTER UPDATE OF state ON tasks
    WHEN OLD.state IN ({_OPEN}) AND NEW.state NOT IN ({_OPEN})
    BEGIN {_count("-", "OLD")} END;
CREATE TRIGGER IF NOT EXISTS task_usage_reopen AFTER UPDATE OF state ON tasks
    WHEN OLD.state NOT IN ({_OPEN}) AND NEW.state IN ({_OPEN})
    BEGIN {_count("+", "NEW")} END;
"""


def count_created(conn: sqlite3.Connection, created: Sequence[Task]) -> None:
    """Count tasks just inserted (in the caller's transaction) into their namespaces' usage."""
    per_namespace = Counter(t.namespace for t in created if not t.state.finished)
    conn.executemany(
        "INSERT INTO task_usage (namespace, open_tasks) VALUES (?, ?)"
        " ON CONFLICT (namespace) DO UPDATE SET open_tasks = open_tasks + excluded.open_tasks",
        per_namespace.items(),
    )


QUOTAS_SCHEMA = """
CREATE TABLE IF NOT EXISTS namespace_quotas (
    namespace TEXT PRIMARY KEY,
    tasks_per_second INTEGER,
    tasks_stored INTEGER,
    schedules INTEGER,
    import_streams INTEGER,
    updated_ms INTEGER NOT NULL,
    task_retention_seconds INTEGER,
    history_retention_seconds INTEGER
);
CREATE TABLE IF NOT EXISTS quota_rate (
    namespace TEXT NOT NULL,
    second INTEGER NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (namespace, second)
) WITHOUT ROWID;
"""
# Seconds a namespace's spent rate rows are kept (a draw deletes the older ones).
_RATE_KEPT_S = 60

_COLUMNS = ", ".join(QUOTA_NAMES)
# Quotas added since the table was made: older files gain their columns on open.
_ADDED_QUOTA_COLUMNS = {
    "namespace_quotas": {
        "task_retention_seconds": "INTEGER",
        "history_retention_seconds": "INTEGER",
    }
}


class SqliteQuotaStore:
    """``QuotaStore`` on the task store's SQLite file (``sqlite:///path``)."""

    def __init__(self, path: str) -> None:
        schema = TASKS_SCHEMA + TASK_USAGE_SCHEMA + TASK_LABELS_SCHEMA + QUOTAS_SCHEMA
        self._db = SqliteRunner(path, schema, {**ADDED_COLUMNS, **_ADDED_QUOTA_COLUMNS})

    async def get(self, namespace: str) -> NamespaceQuotas:
        sql = f"SELECT {_COLUMNS} FROM namespace_quotas WHERE namespace=?"
        row = await self._db.run(lambda conn: conn.execute(sql, (namespace,)).fetchone())
        return NamespaceQuotas() if row is None else NamespaceQuotas(*row)

    async def put(self, namespace: str, quotas: NamespaceQuotas, now_ms: int) -> None:
        values = (namespace, *(getattr(quotas, n) for n in QUOTA_NAMES), now_ms)
        sql = (
            f"INSERT OR REPLACE INTO namespace_quotas (namespace, {_COLUMNS}, updated_ms)"
            f" VALUES ({','.join('?' * len(values))})"
        )

        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.execute(sql, values)

        await self._db.run(work)

    async def usage(self, namespace: str) -> NamespaceUsage:
        sql = "SELECT open_tasks FROM task_usage WHERE namespace=?"
        row = await self._db.run(lambda conn: conn.execute(sql, (namespace,)).fetchone())
        return NamespaceUsage(tasks_stored=max(0, int(row[0])) if row else 0)

    async def count_open(self, namespace: str, part: int) -> OpenCount:
        # One part: the namespace's rows are a range of the primary key, counted in SQL.
        sql = f"SELECT count(*), sum(state IN ({_OPEN})) FROM tasks WHERE namespace=?"
        row = await self._db.run(lambda conn: conn.execute(sql, (namespace,)).fetchone())
        return OpenCount(open_tasks=int(row[1] or 0), read=int(row[0]), next_part=-1)

    async def draw_rate(self, namespace: str, second: int, wanted: int, per_second: int) -> int:
        def work(conn: sqlite3.Connection) -> int:
            with Transaction(conn):  # every process on the file draws in turn
                row = conn.execute(
                    "SELECT used FROM quota_rate WHERE namespace=? AND second=?",
                    (namespace, second),
                ).fetchone()
                used = int(row[0]) if row else 0
                granted = max(0, min(wanted, per_second - used))
                conn.execute(
                    "INSERT OR REPLACE INTO quota_rate VALUES (?, ?, ?)",
                    (namespace, second, used + granted),
                )
                conn.execute(
                    "DELETE FROM quota_rate WHERE namespace=? AND second<?",
                    (namespace, second - _RATE_KEPT_S),
                )
                return granted

        return await self._db.run(work)

    async def namespaces(self) -> Sequence[str]:
        sql = "SELECT namespace FROM task_usage UNION SELECT namespace FROM namespace_quotas"
        rows = await self._db.run(lambda conn: conn.execute(sql).fetchall())
        return sorted(str(r[0]) for r in rows)

    async def put_usage(self, namespace: str, usage: NamespaceUsage) -> None:
        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.execute(
                    "INSERT OR REPLACE INTO task_usage VALUES (?, ?)",
                    (namespace, usage.tasks_stored),
                )

        await self._db.run(work)

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()
