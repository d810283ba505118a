"""A run-history file written before runs kept the server's time opens, gains the column, and
keeps its runs, filed under their finish time; runs recorded since are filed under the
server's time, and the listings by finish time give way to those by filing time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from history.run_history import RUN_COLUMNS, run_values
from history.sqlite import SqliteRunHistory
from tests.factories import T0, make_run
from tikk.model import RunQuery

# The runs table and its listings as the first release made them.
_RELEASED_RUNS = """
CREATE TABLE runs (
    namespace TEXT NOT NULL, run_id TEXT NOT NULL, task_id TEXT NOT NULL, queue TEXT NOT NULL,
    handler TEXT NOT NULL, attempt INTEGER NOT NULL, status INTEGER NOT NULL,
    scheduled_ms INTEGER NOT NULL, due_ms INTEGER NOT NULL, fired_ms INTEGER NOT NULL,
    started_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL, worker_id TEXT NOT NULL,
    error_type TEXT NOT NULL, error_message TEXT NOT NULL, output BLOB NOT NULL,
    idempotency_key TEXT NOT NULL, PRIMARY KEY (namespace, run_id)
);
CREATE INDEX runs_by_task ON runs (namespace, task_id, finished_ms, run_id);
CREATE INDEX runs_by_queue ON runs (namespace, queue, finished_ms, run_id);
"""
HOUR = 3_600_000
# Columns a later release added.
_LATER = ("recorded_ms", "traceback")


def _released_file(path: Path) -> None:
    old = make_run("old", finished_ms=T0 - HOUR)
    columns = [c for c in RUN_COLUMNS if c not in _LATER]
    values = [v for c, v in zip(RUN_COLUMNS, run_values(old), strict=True) if c not in _LATER]
    conn = sqlite3.connect(path)
    conn.executescript(_RELEASED_RUNS)
    marks = ", ".join("?" * len(columns))
    conn.execute(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({marks})", values)
    conn.commit()
    conn.close()


async def test_a_released_file_keeps_its_runs_filed_under_their_finish_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    _released_file(path)
    history = SqliteRunHistory(str(path))
    await history.start()
    try:
        old = await history.get("default", "old")
        assert old.recorded_ms == old.finished_ms == T0 - HOUR
        new = make_run("new", finished_ms=T0 - 5 * HOUR, recorded_ms=T0 - 1)
        await history.append(new)
        query = RunQuery("default", "q", T0 - HOUR, T0)
        found = await history.list_by_queue(query, 10, "")
        assert [r.run_id for r in found.items] == ["new", "old"]
        runs = await history.list_for_task("default", "t1", 10, "")
        assert [r.run_id for r in runs.items] == ["new", "old"]
    finally:
        await history.close()
    conn = sqlite3.connect(path)
    indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    conn.close()
    assert {"runs_by_task", "runs_by_queue"}.isdisjoint(indexes)
    assert {"runs_by_task_filed", "runs_by_queue_filed"} <= indexes
