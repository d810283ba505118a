"""A store file written before a column existed opens, keeps its tasks, and gains the column."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.store.sqlite.schema import TASKS_SCHEMA
from tikk.store.sqlite.tasks import SqliteTaskStore


def _schema_without_trace_context() -> str:
    lines = [line for line in TASKS_SCHEMA.splitlines() if "trace_context" not in line]
    return "\n".join(lines)


async def test_old_file_gains_trace_context_and_keeps_tasks(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(_schema_without_trace_context())
    old.close()
    store = SqliteTaskStore(str(path), shard_count=16)
    await store.start()
    try:
        task = make_task("a").evolve(
            trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
        )
        await store.create(task)
        assert (await store.get("default", "a")).trace_context == task.trace_context
        rows = await store.read_due(task.shard, (second_of(T0) - 60, ""), second_of(task.due_ms), 9)
        assert [r.trace_context for r in rows] == [task.trace_context]
    finally:
        await store.close()
    columns = {row[1] for row in sqlite3.connect(path).execute("PRAGMA table_info(due)")}
    assert "trace_context" in columns
