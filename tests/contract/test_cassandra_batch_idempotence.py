"""A batch may be sent twice (retried on another node, or sent there speculatively) only if
every statement in it may: checked on batches the session builds against a real node, whose
prepared statements carry the decision made once when they were prepared."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contract import cassandra_keyspace
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.drivers.cassandra_batches import PartitionRow
from tikk.store.cassandra import tasks

PLAIN = "DELETE FROM due_index WHERE shard = ? AND minute = ? AND second = ? AND task_key = ?"
INCREMENT = "UPDATE task_usage SET open_tasks = open_tasks + ? WHERE namespace = ?"


@pytest.fixture
def session(keyspace: cassandra_keyspace.TestKeyspace) -> Iterator[CassandraSession]:
    s = CassandraSession(CassandraConfig.from_url(keyspace.fresh()))
    s.connect()
    yield s
    s.shutdown()


def _row(cql: str, params: tuple[object, ...]) -> PartitionRow:
    return PartitionRow("one partition", cql, params, 100)


def test_a_batch_is_idempotent_only_when_each_statement_is(session: CassandraSession) -> None:
    delete = _row(PLAIN, (1, 2, 3, "k"))
    hand_off = _row(tasks.HAND_OFF, (60, 5, 1, 2, 3, "k"))
    plain = session.partition_batches([delete, hand_off])
    mixed = session.partition_batches([delete, _row(INCREMENT, (1, "ns"))])
    assert [b.is_idempotent for b in plain] == [True]
    assert [b.is_idempotent for b in mixed] == [False]
    assert session.prepare(PLAIN).is_idempotent and not session.prepare(INCREMENT).is_idempotent
