"""The counter tally of a Cassandra session (``tikk.drivers.cassandra_counters``) and the
unfinished-task counters kept through it (``tikk.store.cassandra.quotas``): a task write adds
its delta and never waits for a counter; deltas of one counter go out as one update per
flush; an update that certainly did not apply is sent again, one that may have applied is
logged and dropped; a read counts each delta once while a flush is under way; an operator's
repair still fails loudly. The session is a stand-in that records the updates, refuses them,
times out or holds them; the counters on a live cluster are covered by the quota contract
suite."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest
from cassandra import Unavailable, WriteTimeout

from tikk.drivers.cassandra_counters import CounterTally
from tikk.errors import BackendUnavailable
from tikk.quotas import NamespaceUsage
from tikk.store.cassandra.quotas import ADD_USAGE, CassandraQuotaStore, count_usage


class _Session:
    """Binds statements as (cql, params), applies counter updates to ``stored`` and answers;
    or refuses them (``refuse``: the exception the driver gave), or holds each until
    ``release`` is set."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Sequence[Any]]] = []
        self.stored: dict[str, int] = {}
        self.refuse: BaseException | None = None
        self.release: asyncio.Event | None = None
        self.counters = CounterTally(self, flush_s=3600)

    def bind(self, cql: str, params: Sequence[Any]) -> tuple[str, Sequence[Any]]:
        return (cql, params)

    async def execute_many(self, statements: Sequence[Any]) -> list[list[Any]]:
        if self.release is not None:
            await self.release.wait()
        if self.refuse is not None:
            err = BackendUnavailable(f"cassandra: {self.refuse}")
            err.__cause__ = self.refuse
            raise err
        for _, (delta, namespace) in statements:
            self.stored[namespace] = self.stored.get(namespace, 0) + delta
        self.sent += statements
        return [[] for _ in statements]

    async def execute(self, cql: str, params: Sequence[Any] = ()) -> list[Any]:
        count = self.stored.get(params[0])
        return [] if count is None else [_Row(count)]


class _Row:
    def __init__(self, open_tasks: int) -> None:
        self.open_tasks = open_tasks


def _timeout() -> WriteTimeout:
    return WriteTimeout("Coordinator node timed out (COUNTER)", write_type=6)


async def test_deltas_of_one_counter_go_out_as_one_update_per_flush() -> None:
    db = _Session()
    count_usage(db, [("a", 1), ("b", -1), ("a", 1), ("b", 1)])  # type: ignore[arg-type]
    count_usage(db, [("a", 3)])  # type: ignore[arg-type]
    assert db.sent == []  # nothing waits for a counter in the task write
    await db.counters.flush()
    assert [params for _, params in db.sent] == [[5, "a"]]
    await db.counters.flush()
    assert len(db.sent) == 1


async def test_an_update_that_certainly_did_not_apply_is_sent_again() -> None:
    db = _Session()
    db.refuse = Unavailable("Cannot achieve consistency level LOCAL_QUORUM")
    count_usage(db, [("shop", 2)])  # type: ignore[arg-type]
    await db.counters.flush()
    db.refuse = None
    count_usage(db, [("shop", 1)])  # type: ignore[arg-type]
    await db.counters.flush()
    assert db.stored == {"shop": 3}


async def test_an_update_that_may_have_applied_is_logged_not_sent_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = _Session()
    db.refuse = _timeout()
    count_usage(db, [("shop", -1), ("shop", -2)])  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="tikk.store"):
        await db.counters.flush()
    [record] = caplog.records
    assert "task_usage['shop'] moved by -3" in record.getMessage()
    db.refuse = None
    await db.counters.flush()
    assert db.sent == [] and db.counters.unconfirmed(ADD_USAGE, ["shop"]) == 0


async def test_a_read_during_a_flush_counts_each_delta_once() -> None:
    db = _Session()
    store = CassandraQuotaStore(db)  # type: ignore[arg-type]
    db.stored["shop"] = 10
    count_usage(db, [("shop", 4)])  # type: ignore[arg-type]
    assert await store.usage("shop") == NamespaceUsage(tasks_stored=14)
    db.release = asyncio.Event()
    flushing = asyncio.create_task(db.counters.flush())
    await asyncio.sleep(0)  # the flush holds its update now
    reading = asyncio.create_task(store.usage("shop"))
    await asyncio.sleep(0.01)
    assert not reading.done()  # it waits for the flush rather than count its delta twice
    db.release.set()
    await flushing
    assert await reading == NamespaceUsage(tasks_stored=14)


async def test_a_read_waits_for_a_stuck_flush_only_so_long() -> None:
    db = _Session()
    store = CassandraQuotaStore(db)  # type: ignore[arg-type]
    count_usage(db, [("shop", 4)])  # type: ignore[arg-type]
    db.release = asyncio.Event()  # never set: a leader that is gone
    flushing = asyncio.create_task(db.counters.flush())
    await asyncio.sleep(0)
    assert await asyncio.wait_for(store.usage("shop"), 3.0) == NamespaceUsage(tasks_stored=4)
    flushing.cancel()


async def test_the_background_flush_writes_and_stop_writes_the_rest() -> None:
    db = _Session()
    db.counters = CounterTally(db, flush_s=0.01)
    db.counters.start()
    count_usage(db, [("shop", 1)])  # type: ignore[arg-type]
    for _ in range(200):
        if db.stored:
            break
        await asyncio.sleep(0.01)
    assert db.stored == {"shop": 1}
    count_usage(db, [("shop", 1)])  # type: ignore[arg-type]
    await db.counters.stop()
    assert db.stored == {"shop": 2}


async def test_a_repair_that_fails_raises() -> None:
    db = _Session()
    db.refuse = _timeout()
    store = CassandraQuotaStore(db)  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailable):
        await store.put_usage("shop", NamespaceUsage(tasks_stored=5))
