"""The unfinished-task counters on Cassandra (``tikk.store.cassandra.quotas``): an update that
fails, or goes unanswered for a while, after the task rows it counts were written is logged,
not raised (raising failed creates and results whose change was durable, which their clients
then sent again); an operator's repair of a counter still fails loudly. The session is a
stand-in that records the updates, refuses them or never answers; the counters' behaviour on
a live cluster is covered by the quota contract suite."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import pytest

from tikk.errors import BackendUnavailable
from tikk.quotas import NamespaceUsage
from tikk.store.cassandra.quotas import CassandraQuotaStore, count_usage


class _Session:
    """Binds statements as (cql, params) and runs them, refuses every write, or never answers."""

    def __init__(self, refuse: bool, answer: bool = True) -> None:
        self.refuse = refuse
        self.answer = answer
        self.sent: list[tuple[str, Sequence[Any]]] = []

    def bind(self, cql: str, params: Sequence[Any]) -> tuple[str, Sequence[Any]]:
        return (cql, params)

    async def execute_many(self, statements: Sequence[Any]) -> list[list[Any]]:
        if self.refuse and statements:
            raise BackendUnavailable("cassandra: Coordinator node timed out (COUNTER)")
        if not self.answer:
            await asyncio.Event().wait()  # a leader that is gone: no answer for seconds
        self.sent += statements
        return [[] for _ in statements]

    async def execute(self, cql: str, params: Sequence[Any] = ()) -> list[Any]:
        return []  # no counter row yet: the usage reads as 0


async def test_deltas_of_one_namespace_go_out_as_one_update() -> None:
    db = _Session(refuse=False)
    await count_usage(db, [("a", 1), ("b", -1), ("a", 1), ("b", 1)])  # type: ignore[arg-type]
    assert [params for _, params in db.sent] == [[2, "a"]]


async def test_a_failed_update_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    db = _Session(refuse=True)
    with caplog.at_level(logging.WARNING, logger="tikk.store"):
        await count_usage(db, [("shop", -1), ("shop", -2)])  # type: ignore[arg-type]
    [record] = caplog.records
    assert "'shop' -3" in record.getMessage() and "recount" in record.getMessage()


async def test_a_task_write_waits_for_its_counter_update_only_so_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = _Session(refuse=False, answer=False)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="tikk.store"):
        await count_usage(db, [("shop", 1)], wait_s=0.05)  # type: ignore[arg-type]
    assert time.monotonic() - began < 1.0
    [record] = caplog.records
    assert "'shop' +1" in record.getMessage() and "may still apply" in record.getMessage()


async def test_a_repair_that_fails_raises() -> None:
    store = CassandraQuotaStore(_Session(refuse=True))  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailable):
        await store.put_usage("shop", NamespaceUsage(tasks_stored=5))
