"""Moving a Cassandra task row on: the conditional update every change of a task's attempt
or due time goes through, and the move of a scheduled task's due time (a late write placed
again, a reschedule) with its due-index rows in the order that never leaves it unfired."""

from __future__ import annotations

from tikk.buckets import minute_of_second, second_of, task_key
from tikk.drivers.cassandra import CassandraSession
from tikk.model import Task
from tikk.store.cassandra.schema import TASK_RETENTION_S
from tikk.store.cassandra.task_rows import INSERT_DUE, due_values, task_values, ttl_after
from tikk.store.tasks import TASK_COLUMNS

# Moving a task on (a finished attempt, a moved due time) is conditional on the state it was
# read in: two reports of one run, or a report racing a dispatcher, must not overwrite each
# other's progress (a read-then-write would let a late duplicate set a dispatched attempt
# back to scheduled). All of the row is rewritten so every cell gets the new TTL.
_SETTABLE = [c for c in TASK_COLUMNS if c not in ("namespace", "task_id")]
UPDATE_TASK_IF = (
    f"UPDATE tasks USING TTL ? SET {', '.join(f'{c} = ?' for c in _SETTABLE)}"
    " WHERE namespace = ? AND task_id = ? IF state = ? AND attempt = ? AND due_ms = ?"
)
DELETE_DUE = "DELETE FROM due_index WHERE shard = ? AND minute = ? AND second = ? AND task_key = ?"


async def update_task_if(
    db: CassandraSession, new: Task, read: Task, now_ms: int, retention_s: int = TASK_RETENTION_S
) -> bool:
    """Write ``new`` over the task row if it is still in the state ``read`` saw, kept
    ``retention_s`` past its due time."""
    ttl = ttl_after(new.due_ms, now_ms, retention_s)
    rows = await db.execute(UPDATE_TASK_IF, [
        ttl, *task_values(new)[2:], new.namespace, new.task_id,
        int(read.state), read.attempt, read.due_ms,
    ])  # fmt: skip
    return bool(rows and rows[0][0])


async def move_task(
    db: CassandraSession, task: Task, moved: Task, now_ms: int, retention_s: int = TASK_RETENTION_S
) -> bool:
    """Move the scheduled ``task`` (as read) to ``moved``'s due time; whether the task row
    took it (False: it changed first, e.g. a dispatcher took it at its old time).

    A claim reading a row due after the task row's time finishes that move itself
    (``claims``), and one due before it is stale. So a later row is written before the task
    row (a claim in between fires the task at its old time, and the update is refused,
    leaving the new row a stray no task matches), and an earlier one after it (a crash in
    between leaves the old row, which then fires the task at its old time): never at
    neither time."""
    later = moved.due_ms >= task.due_ms
    if later:
        await db.execute(INSERT_DUE, due_values(moved.entry(), now_ms))
    if not await update_task_if(db, moved, task, now_ms, retention_s):
        return False
    if not later:
        await db.execute(INSERT_DUE, due_values(moved.entry(), now_ms))
    second = second_of(task.due_ms)
    if second_of(moved.due_ms) != second:
        key = task_key(task.namespace, task.task_id)
        await db.execute(DELETE_DUE, [task.shard, minute_of_second(second), second, key])
    return True
