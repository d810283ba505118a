"""Which statements the Cassandra session may send twice (retried on another node, or sent
there speculatively): reads and writes of values, never a condition or an increment, and a
batch only if all of its statements may."""

from __future__ import annotations

import pytest

from tikk.drivers.cassandra import is_idempotent
from tikk.store.cassandra import claims, credentials, due_counts, quotas, task_rows, tasks
from tikk.store.cassandra.task_creates import CREATE_TASK


@pytest.mark.parametrize(
    "cql",
    [
        task_rows.SELECT_DUE,
        tasks.HAND_OFF,
        tasks.SET_STATE,
        "UPDATE tasks USING TTL ? AND TIMESTAMP ? SET state = ? WHERE namespace = ?",
        "INSERT INTO runs (a, b) VALUES (?, ?) USING TTL ?",
        "DELETE FROM due_index WHERE shard = ? AND minute = ?",
        # A column whose name holds "if" is no condition.
        "UPDATE t SET modified_ms = ?, diff = ? WHERE k = ?",
    ],
)
def test_reads_and_writes_of_values_may_be_sent_twice(cql: str) -> None:
    assert is_idempotent(cql)


@pytest.mark.parametrize(
    "cql",
    [
        tasks.MOVE_CURSOR,
        claims.CLAIM_START,
        claims.FINISH_MOVE,
        CREATE_TASK,
        credentials.REVOKE_CREDENTIAL,
        quotas.DRAW_MORE,
        quotas.ADD_USAGE,
        due_counts._ADD,
        "UPDATE t SET a = ?, hits = hits - ? WHERE k = ?",
        "delete from t where k = ? if exists",
    ],
)
def test_conditions_and_increments_are_sent_once(cql: str) -> None:
    assert not is_idempotent(cql)
