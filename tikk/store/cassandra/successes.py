"""Successes on Cassandra without a consensus round: ``TaskStore.succeed_many``.

Success is most of what workers report, and a lightweight transaction per task (four round
trips and Paxos state written for each) was the largest share of the node's work per fired
task. A success is written the way a dispatcher's claim is (``tikk.store.cassandra.claims``):

1. read the task rows (a few per request): a task still DISPATCHED at the reported attempt
   and due time may succeed, and ``WRITETIME(state)`` says when that state was written;
2. write SUCCEEDED one microsecond after it, with a token of this report in
   ``succeeded_by``: every write made after the read (a failure report's transaction, a
   start expiring) outranks it, so a success never undoes what came after;
3. read again: the report succeeded if the row is SUCCEEDED with its token.

Two successes of one attempt (a duplicate delivery) that both read DISPATCHED write at the same
timestamp; Cassandra then keeps the larger value for every reader. The token starts with a
number that falls as ``now_ms`` grows, so the earlier write keeps winning once it was read:
a twin written later loses, however late it is. Only twins written by servers whose clocks
disagree by more than the gap between their writes may both read their own token (each
between the other's write and its own); both are then recorded as successes (the history
keeps both runs in any case), the namespace's count of unfinished tasks drops once too often
(``tikk quota recount`` repairs it), and nothing runs again or is lost.

A success that lost (to a later write or to its twin) changes nothing that anyone reads, and
the caller learns it as it did from a transaction that did not apply.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from tikk.drivers.cassandra import CassandraSession
from tikk.drivers.cassandra_batches import MAX_BATCH_PARTITIONS, PartitionRow
from tikk.model import DueEntry, TaskState
from tikk.store.cassandra.task_rows import cells_ttl, read_states

SUCCEED_AFTER = (
    "UPDATE tasks USING TTL ? AND TIMESTAMP ? SET state = ?, updated_ms = ?, succeeded_by = ?"
    " WHERE namespace = ? AND task_id = ?"
)
_TOKEN_TIME_BASE = 10**15  # past any epoch millisecond this store will see (year 33658)


async def succeed_after_read(
    db: CassandraSession, entries: Sequence[DueEntry], now_ms: int
) -> list[bool]:
    """Whether each entry's success holds (see the module); the same task may come twice."""
    found = await read_states(db, entries)
    tokens = [_token(now_ms) for _ in entries]
    written = [
        (e, _write(e, row, token, now_ms))
        for e, token in zip(entries, tokens, strict=True)
        if (row := found.get((e.namespace, e.task_id))) is not None and _may_succeed(e, row)
    ]
    if not written:
        return [False] * len(entries)
    writes = [write for _, write in written]
    await db.execute_many(db.partition_batches(writes, MAX_BATCH_PARTITIONS))
    # Only a task written to can hold a token of this call: the others are not read again.
    after = await read_states(db, [e for e, _ in written])
    return [
        (row := after.get((e.namespace, e.task_id))) is not None
        and row.state == TaskState.SUCCEEDED
        and row.attempt == e.attempt
        and row.succeeded_by == token
        for e, token in zip(entries, tokens, strict=True)
    ]


def _token(now_ms: int) -> str:
    """Unique to one report; of two, the one made at the earlier ``now_ms`` compares larger."""
    return f"{_TOKEN_TIME_BASE - now_ms:016d}-{uuid.uuid4().hex}"


def _may_succeed(e: DueEntry, row: Any) -> bool:
    return bool(
        row.state == TaskState.DISPATCHED and row.attempt == e.attempt and row.due_ms == e.due_ms
    )


def _write(e: DueEntry, read: Any, token: str, now_ms: int) -> PartitionRow:
    params = [
        cells_ttl(read, e.due_ms, now_ms), read.state_written + 1, int(TaskState.SUCCEEDED),
        now_ms, token, e.namespace, e.task_id,
    ]  # fmt: skip
    return PartitionRow(("tasks", e.namespace, e.task_id), SUCCEED_AFTER, params, 120)
