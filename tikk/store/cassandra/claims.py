"""Claims on Cassandra: a dispatcher's claim of the tasks of due rows (SCHEDULED ->
DISPATCHED), and the one transaction that decides whether an attempt with a start timeout
started or expired. Semantics in ``tikk.store.tasks`` (``mark_dispatched``, ``claim_start``,
``expire_start``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from tikk.buckets import minute_of_second
from tikk.drivers.cassandra import CassandraSession
from tikk.drivers.cassandra_batches import MAX_BATCH_PARTITIONS, PartitionRow
from tikk.model import Claimed, DueEntry, TaskState
from tikk.store.cassandra.schema import TASK_RETENTION_S
from tikk.store.cassandra.task_rows import (
    INSERT_DUE,
    SELECT_TASK,
    cells_ttl,
    due_values,
    half_written,
    read_states,
)

# A dispatcher's claim (SCHEDULED -> DISPATCHED) takes no transaction: it is written one
# microsecond after the state it read, so every write made after that read (a report, a
# move, a cancel, another dispatcher's claim) outranks it. A dispatcher that stalled
# between its read and its write (paused, or its store slow) cannot set a task that has
# moved on since back to dispatched, where nothing would ever finish it.
CLAIM_DISPATCH = (
    "UPDATE tasks USING TTL ? AND TIMESTAMP ? SET state = ?, updated_ms = ?"
    " WHERE namespace = ? AND task_id = ?"
)
# Finishing a half-done move: conditional, like the move itself, so that one of the two wins.
# Its cells end with the row's others (written for the earlier due time).
FINISH_MOVE = (
    "UPDATE tasks USING TTL ? SET state = ?, due_ms = ?, updated_ms = ?"
    " WHERE namespace = ? AND task_id = ? IF state = ? AND attempt = ? AND due_ms = ?"
)
CLAIM_START = (
    "INSERT INTO start_claims (namespace, task_id, attempt, due_ms, claim, claimed_ms)"
    " VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?"
)


async def claim_due(db: CassandraSession, entries: Sequence[DueEntry], now_ms: int) -> Claimed:
    """``TaskStore.mark_dispatched``. The task rows read a few at a time, then every claim
    written in a few unlogged batches; only a half-done move (rare) takes the slow path of
    its own."""
    found = await read_states(db, entries)
    states: list[TaskState | None] = []
    writes: list[PartitionRow] = []
    unfinished: list[DueEntry] = []
    for e in entries:
        row = found.get((e.namespace, e.task_id))
        claim = _claimable(e, row)
        if claim == "moving":
            claim = await _claim_alone(db, e, now_ms)
        elif claim is TaskState.SCHEDULED:
            writes.append(_claim_write(e, row, now_ms))
        if claim == "unfinished":
            unfinished.append(e)
            claim = None
        elif claim is not None and e.start_timeout_ms:
            writes.append(_deadline_write(e, now_ms))
        states.append(claim)
    await db.execute_many(db.partition_batches(writes, MAX_BATCH_PARTITIONS))
    ready = [e for e, state in zip(entries, states, strict=True) if state is not None]
    resent = sum(state is TaskState.DISPATCHED for state in states)
    return Claimed(ready, resent, unfinished)


def _claim_write(e: DueEntry, read: Any, now_ms: int) -> PartitionRow:
    return PartitionRow(
        ("tasks", e.namespace, e.task_id), CLAIM_DISPATCH, _claim_params(e, read, now_ms), 120
    )


def _deadline_write(e: DueEntry, now_ms: int) -> PartitionRow:
    """The due row at the start deadline, where an attempt nobody started is given up."""
    deadline = e.start_deadline()
    size = 300 + len(e.payload)
    partition = ("due_index", deadline.shard, minute_of_second(deadline.second))
    return PartitionRow(partition, INSERT_DUE, due_values(deadline, now_ms), size)


async def _claim_alone(
    db: CassandraSession, e: DueEntry, now_ms: int
) -> TaskState | Literal["unfinished"] | None:
    """Claim the task of row ``e`` (SCHEDULED → DISPATCHED) on its own; the state it was
    in, or None if the row does not fire it (see ``_claimable``)."""
    for _ in range(2):
        rows = await db.execute(SELECT_TASK, [e.namespace, e.task_id])
        state = _claimable(e, rows[0] if rows else None)
        if state != "moving":
            if state is TaskState.SCHEDULED:
                await db.execute(CLAIM_DISPATCH, _claim_params(e, rows[0], now_ms))
            return state
        t = rows[0]
        # A move half done (``move_due`` writes the new row before the task row): finish
        # it, or the task would be left with no row to fire it. The server may be
        # finishing it at the same moment; if it won, read again and claim as usual.
        done = await db.execute(FINISH_MOVE, [
            cells_ttl(t, t.due_ms, now_ms), int(TaskState.DISPATCHED), e.due_ms, now_ms,
            e.namespace, e.task_id,
            int(TaskState.SCHEDULED), e.attempt, t.due_ms,
        ])  # fmt: skip
        if done and done[0][0]:
            return TaskState.SCHEDULED
    return None


def _claimable(e: DueEntry, t: Any) -> TaskState | Literal["moving", "unfinished"] | None:
    """What the task row ``t`` says of firing the due row ``e``: SCHEDULED (claim it),
    DISPATCHED (already claimed: send again), "moving" (a move to this row is half done),
    "unfinished" (its create has not written its completion mark yet: not now), or None
    (the row is stale)."""
    if t is None:
        return None
    # Until the mark, the task is invisible to every read, so a worker's report of it would
    # find nothing. The mark usually follows within milliseconds and a rescan finds the row
    # again; a create that died before it is completed by the client's retry, which places
    # the row again if it is late by then (``server.late_writes``).
    if half_written(t):
        return "unfinished"
    if t.attempt != e.attempt:
        return None
    if t.state == TaskState.DISPATCHED:
        return TaskState.DISPATCHED if t.due_ms == e.due_ms else None
    if t.state != TaskState.SCHEDULED or t.due_ms > e.due_ms:
        return None
    return TaskState.SCHEDULED if t.due_ms == e.due_ms else "moving"


def _claim_params(e: DueEntry, read: Any, now_ms: int) -> list[Any]:
    """The parameters of ``CLAIM_DISPATCH`` for the task row ``read`` (scheduled)."""
    return [
        cells_ttl(read, e.due_ms, now_ms), read.state_written + 1, int(TaskState.DISPATCHED),
        now_ms, e.namespace, e.task_id,
    ]  # fmt: skip


async def claim_attempt_start(db: CassandraSession, e: DueEntry, claim: str, now_ms: int) -> bool:
    """One lightweight transaction decides an attempt's start; whether ``claim`` won.
    (The due time is part of the key: a re-drive starts at attempt 1 again.)"""
    params = [e.namespace, e.task_id, e.attempt, e.due_ms, claim, now_ms, TASK_RETENTION_S]
    rows = await db.execute(CLAIM_START, params)
    return bool(rows[0][0]) or rows[0].claim == claim
