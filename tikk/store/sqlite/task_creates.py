"""Creating tasks on SQLite, inside the caller's transaction, so that a task and its due row
are written together or not at all (the schedule store creates an occurrence's task in the
same transaction as its step)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from tikk.errors import AlreadyExists, TikkError
from tikk.model import Task
from tikk.store.sqlite.quotas import count_created
from tikk.store.sqlite.task_rows import (
    INSERT_TASK,
    REPLACE_DUE,
    due_row,
    task_from_sql_row,
    task_row,
)
from tikk.store.tasks import TASK_COLUMNS

_TASK_COLUMNS = ", ".join(TASK_COLUMNS)
# Ids looked up per statement when a batch of creates checks which exist (SQLite's default
# limit on host parameters is far above this).
_IDS_PER_LOOKUP = 500


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
    conn.executemany(REPLACE_DUE, [due_row(t.entry()) for t in fresh])
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
                task = task_from_sql_row(row)
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
