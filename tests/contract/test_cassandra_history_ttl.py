"""A namespace's history retention on Cassandra is its runs' TTL: the rows of a run appended
after ``keep_for`` expire after the namespace's retention, in all three tables; other
namespaces' keep the history's 30 days."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from history.cassandra import HISTORY_RETENTION_S, CassandraRunHistory
from server.ops.quotas import QuotaGate
from server.ops.retention import Pruned, RetentionPrune
from server.wiring import QUOTA_STORES, RUN_HISTORIES, SCHEDULE_STORES, TASK_STORES, Drivers
from tests.contract import cassandra_keyspace
from tests.contract.conftest import open_backend
from tests.factories import T0, make_run
from tikk.clock import ManualClock
from tikk.drivers.cassandra import CassandraSession
from tikk.quotas import NamespaceQuotas
from tikk.settings import QuotaSettings


@pytest.fixture
async def chistory(
    keyspace: cassandra_keyspace.TestKeyspace,
) -> AsyncIterator[tuple[CassandraRunHistory, CassandraSession]]:
    drivers = Drivers()
    url = keyspace.fresh()
    history = await open_backend(RUN_HISTORIES, url, drivers)
    assert isinstance(history, CassandraRunHistory)
    yield history, drivers.cassandra(url, "url")
    await history.close()


async def ttls(db: CassandraSession, namespace: str, run_id: str, task_id: str) -> list[int]:
    """The TTL left on each of a run's three rows (filtered reads: a test's handful of rows)."""
    reads = [
        ("runs", "run_id = ?", [run_id]),
        ("runs_by_task", "task_id = ? AND run_id = ? ALLOW FILTERING", [task_id, run_id]),
        ("runs_by_queue", "queue = 'q' AND run_id = ? ALLOW FILTERING", [run_id]),
    ]
    found = []
    for table, where, args in reads:
        rows = await db.execute(
            f"SELECT TTL(handler) AS ttl FROM {table} WHERE namespace = ? AND {where}",
            [namespace, *args],
        )
        found.append(int(rows[0].ttl))
    return found


async def test_runs_carry_their_namespaces_retention_as_ttl(
    chistory: tuple[CassandraRunHistory, CassandraSession],
) -> None:
    history, db = chistory
    history.keep_for("brief", 120)
    await history.append(make_run("r1", namespace="brief"))
    await history.append(make_run("r2", namespace="other"))
    assert all(100 < t <= 120 for t in await ttls(db, "brief", "r1", "t1"))
    assert all(t > HISTORY_RETENTION_S - 100 for t in await ttls(db, "other", "r2", "t1"))
    history.keep_for("brief", None)  # back to the history's own
    await history.append(make_run("r3", namespace="brief"))
    assert all(t > HISTORY_RETENTION_S - 100 for t in await ttls(db, "brief", "r3", "t1"))


async def test_a_retention_pass_gives_the_history_each_namespaces_retention(
    chistory: tuple[CassandraRunHistory, CassandraSession],
    keyspace: cassandra_keyspace.TestKeyspace,
) -> None:
    history, db = chistory
    drivers = Drivers()
    store = await open_backend(TASK_STORES, keyspace.url(), drivers)
    quotas = await open_backend(QUOTA_STORES, keyspace.url(), drivers)
    schedules = await open_backend(SCHEDULE_STORES, keyspace.url(), drivers)
    try:
        await quotas.put("brief", NamespaceQuotas(history_retention_seconds=300), T0)
        gate = QuotaGate(quotas, schedules, ManualClock(T0), QuotaSettings())
        prune = RetentionPrune(store, history, quotas, gate, clock=ManualClock(T0))
        assert await prune.pass_once() == Pruned()  # Cassandra deletes nothing itself
        await history.append(make_run("r1", namespace="brief"))
        assert all(280 < t <= 300 for t in await ttls(db, "brief", "r1", "t1"))
    finally:
        for part in (schedules, quotas, store):
            await part.close()
