"""Queue controls and parked rows on Cassandra; semantics in ``tikk.store.queue_holds``.

Tables (``schema`` step 15): ``queue_controls``, every queue's control in one small
partition; ``parked_rows``, one partition per queue and shard clustered by due time, with a
due-index row's columns. A released row is deleted; its owner reads on from the last row it
released, so a release never walks back over its own tombstones, which expire after an hour.
Rows outlive a long pause by the task retention, and are written with it as TTL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tikk.drivers.cassandra import CassandraSession
from tikk.drivers.cassandra_batches import PartitionRow
from tikk.model import DueEntry, TaskState
from tikk.queue_holds import SKIPPED, QueueControl
from tikk.store.cassandra.quotas import count_usage
from tikk.store.cassandra.schema import TASK_RETENTION_S
from tikk.store.cassandra.task_rows import (
    cells_ttl,
    entry_from_cql_row,
    half_written,
    read_states,
)
from tikk.store.queue_holds import ParkedPosition
from tikk.store.tasks import DUE_COLUMNS

_CONTROL_COLUMNS = "queue, paused, paused_ms, rate_per_s, skip_older_than_ms, updated_ms"
SELECT_CONTROLS = f"SELECT {_CONTROL_COLUMNS} FROM queue_controls WHERE ring = 0"
INSERT_CONTROL = (
    f"INSERT INTO queue_controls (ring, {_CONTROL_COLUMNS}) VALUES (0, ?, ?, ?, ?, ?, ?)"
)
_PARKED_COLUMNS = ("task_key", *DUE_COLUMNS)
INSERT_PARKED = (
    f"INSERT INTO parked_rows ({', '.join(_PARKED_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(_PARKED_COLUMNS))}) USING TTL ?"
)
# A due-index read's columns; a parked row was never handed off.
SELECT_PARKED = (
    f"SELECT {', '.join(DUE_COLUMNS)} FROM parked_rows WHERE queue = ? AND shard = ?"
    " AND (due_ms, task_key) > (?, ?) LIMIT ?"
)
DELETE_PARKED = (
    "DELETE FROM parked_rows WHERE queue = ? AND shard = ? AND due_ms = ? AND task_key = ?"
)
# Keys, not count(*): a count reads the whole partition whatever its limit.
KEYS_PARKED = "SELECT task_key FROM parked_rows WHERE queue = ? AND shard = ? LIMIT ?"
# Like a dispatcher's claim (``claims.CLAIM_DISPATCH``): written just after the state read,
# so whatever was written since outranks it.
SKIP_TASK = (
    "UPDATE tasks USING TTL ? AND TIMESTAMP ? SET state = ?, updated_ms = ?,"
    " last_error_type = ?, last_error_message = ? WHERE namespace = ? AND task_id = ?"
)


def _control(row: Any) -> QueueControl:
    return QueueControl(
        row.queue, bool(row.paused), row.paused_ms or 0, row.rate_per_s or 0.0,
        row.skip_older_than_ms or 0, row.updated_ms or 0,
    )  # fmt: skip


class CassandraQueueHoldStore:
    """``QueueHoldStore`` on a keyspace; ``session`` may be shared with the other backends of
    the keyspace (``start``/``close`` count its users)."""

    def __init__(self, session: CassandraSession, shard_count: int) -> None:
        self._db = session
        self._shard_count = shard_count

    async def controls(self) -> dict[str, QueueControl]:
        return {row.queue: _control(row) for row in await self._db.execute(SELECT_CONTROLS)}

    async def set_control(self, control: QueueControl) -> None:
        c = control
        params = [c.queue, c.paused, c.paused_ms, c.rate_per_s, c.skip_older_than_ms, c.updated_ms]
        await self._db.execute(INSERT_CONTROL, params)

    async def park(self, entries: Sequence[DueEntry]) -> None:
        rows = [
            PartitionRow(_partition(e), INSERT_PARKED, _park_values(e), 300 + len(e.payload))
            for e in entries
        ]
        await self._db.execute_many(self._db.partition_batches(rows))

    async def read_parked(
        self, queue: str, shard: int, after: ParkedPosition, limit: int
    ) -> list[DueEntry]:
        rows = await self._db.execute(SELECT_PARKED, [queue, shard, after[0], after[1], limit])
        return [entry_from_cql_row(r) for r in rows]

    async def unpark(self, entries: Sequence[DueEntry]) -> None:
        rows = [
            PartitionRow(_partition(e), DELETE_PARKED, [e.queue, e.shard, e.due_ms, e.key], 60)
            for e in entries
        ]
        await self._db.execute_many(self._db.partition_batches(rows))

    async def count_parked(self, queue: str, most: int) -> int:
        shards = range(self._shard_count)
        found = await asyncio.gather(
            *(self._db.execute(KEYS_PARKED, [queue, shard, most]) for shard in shards)
        )
        return min(most, sum(len(rows) for rows in found))

    async def skip(self, entries: Sequence[DueEntry], reason: str, now_ms: int) -> list[DueEntry]:
        found = await read_states(self._db, entries)
        skipped = [e for e in entries if _fires(e, found.get((e.namespace, e.task_id)))]
        rows = [found[(e.namespace, e.task_id)] for e in skipped]
        writes = [
            self._db.bind(SKIP_TASK, _skip_values(e, row, reason, now_ms))
            for e, row in zip(skipped, rows, strict=True)
        ]
        await self._db.execute_many(writes)
        count_usage(self._db, [(e.namespace, -1) for e in skipped])
        return skipped

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()


def _partition(e: DueEntry) -> tuple[str, str, int]:
    return ("parked_rows", e.queue, e.shard)


def _skip_values(e: DueEntry, read: Any, reason: str, now_ms: int) -> list[Any]:
    """``SKIP_TASK``'s parameters for the task row ``read`` (scheduled)."""
    return [
        cells_ttl(read, e.due_ms, now_ms), read.state_written + 1, int(TaskState.CANCELLED), now_ms,
        SKIPPED, reason, e.namespace, e.task_id,
    ]  # fmt: skip


def _park_values(e: DueEntry) -> list[Any]:
    return [
        e.key, e.shard, e.due_ms, e.namespace, e.task_id, e.attempt, e.queue, e.handler,
        e.payload, dict(e.labels), e.max_attempts, e.scheduled_ms, dict(e.trace_context),
        e.schedule_id, e.start_timeout_ms, e.execution_timeout_ms, TASK_RETENTION_S,
    ]  # fmt: skip


def _fires(e: DueEntry, t: Any) -> bool:
    """Whether the task row ``t`` is still SCHEDULED at the parked row's attempt and time."""
    return (
        t is not None and not half_written(t) and t.attempt == e.attempt
        and t.state == TaskState.SCHEDULED and t.due_ms == e.due_ms
    )  # fmt: skip
