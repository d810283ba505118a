"""The embedded task store's queries over many tasks: a label's tasks through the label index
(``schema.TASK_LABELS_SCHEMA``), their count, the prune of finished tasks; and the cancel of
one task inside a transaction, which a cancel of many repeats in one; and the move of a
task's due time with its row."""

from __future__ import annotations

import sqlite3

from tikk.drivers.sqlite import Transaction
from tikk.errors import FailedPrecondition, NotFound, TikkError
from tikk.model import Task, TaskState
from tikk.store.sqlite.task_rows import delete_due, fetch_task, insert_due, save_task
from tikk.store.tasks import TASK_COLUMNS, require_scheduled

# A label's tasks: the index's rows in task id order, each joined to its task row.
BY_LABEL = (
    f"SELECT {', '.join('tasks.' + c for c in TASK_COLUMNS)} FROM task_labels"
    " JOIN tasks ON tasks.namespace = task_labels.namespace"
    " AND tasks.task_id = task_labels.task_id"
    " WHERE task_labels.namespace = ? AND task_labels.label = ? AND task_labels.task_id > ?"
    " ORDER BY task_labels.task_id LIMIT ?"
)
_COUNT_BY_LABEL = (
    "SELECT count(*) FROM (SELECT 1 FROM task_labels WHERE namespace = ? AND label = ? LIMIT ?)"
)
_COUNT_BY_LABEL_IN_STATE = (
    "SELECT count(*) FROM (SELECT 1 FROM task_labels JOIN tasks"
    " ON tasks.namespace = task_labels.namespace AND tasks.task_id = task_labels.task_id"
    " WHERE task_labels.namespace = ? AND task_labels.label = ? AND tasks.state = ? LIMIT ?)"
)
_FINISHED = [s for s in TaskState if s.finished]
_PRUNE_FINISHED = (
    "DELETE FROM tasks WHERE rowid IN (SELECT rowid FROM tasks"
    " WHERE namespace = ? AND state = ? AND updated_ms < ? LIMIT ?)"
)


def count_by_label_query(
    namespace: str, label: tuple[str, str], state: TaskState | None, most: int
) -> tuple[str, list[object]]:
    """The count of a label's tasks (in ``state``), up to ``most + 1``, in SQL: no task row
    is decoded, so a count of 100,000 takes a fraction of a second."""
    key = "=".join(label)
    if state is None:
        return _COUNT_BY_LABEL, [namespace, key, most + 1]
    return _COUNT_BY_LABEL_IN_STATE, [namespace, key, int(state), most + 1]


def prune_finished(conn: sqlite3.Connection, namespace: str, before_ms: int, most: int) -> int:
    """Delete up to ``most`` finished tasks of the namespace changed before ``before_ms``,
    through the (namespace, state, updated_ms) index a state at a time; the label index
    follows by trigger, and a finished task has no due row left."""
    deleted = 0
    with Transaction(conn):
        for state in _FINISHED:
            args = (namespace, int(state), before_ms, most - deleted)
            deleted += conn.execute(_PRUNE_FINISHED, args).rowcount
    return deleted


def move_in(conn: sqlite3.Connection, task: Task, moved: Task) -> Task:
    """Write the scheduled ``task`` (as read) as ``moved``, its due row with it, in the
    caller's transaction (a late write placed again, a reschedule)."""
    delete_due(conn, task)
    save_task(conn, moved)
    insert_due(conn, moved.entry())
    return moved


def cancel_in(conn: sqlite3.Connection, namespace: str, task_id: str, now_ms: int) -> Task:
    """Cancel one task in the caller's transaction (``TaskStore.cancel``): no fence, as the
    check and the write are one transaction, serialised with claims."""
    task = fetch_task(conn, namespace, task_id)
    if task.state is TaskState.CANCELLED:
        return task
    require_scheduled(task, "cancelled")
    cancelled = task.evolve(state=TaskState.CANCELLED, updated_ms=now_ms)
    save_task(conn, cancelled)
    delete_due(conn, task)
    return cancelled


def cancel_each(
    conn: sqlite3.Connection, namespace: str, task_ids: list[str], now_ms: int
) -> list[Task | TikkError]:
    """``cancel_in`` of each task in one transaction, a refusal in its place."""
    outcomes: list[Task | TikkError] = []
    with Transaction(conn):
        for task_id in task_ids:
            try:
                outcomes.append(cancel_in(conn, namespace, task_id, now_ms))
            except (NotFound, FailedPrecondition) as exc:
                outcomes.append(exc)
    return outcomes
