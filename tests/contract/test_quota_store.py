"""The QuotaStore contract (tikk.store.quotas), run against every backend, with the usage
that the task store of the same database counts."""

from __future__ import annotations

import asyncio
import sqlite3

from server.wiring import QUOTA_STORES, Drivers
from tests.contract.conftest import QuotaBackend, open_backend
from tests.factories import T0, make_task
from tikk.clock import ManualClock
from tikk.model import DeadLetter, RetryAt, Succeed
from tikk.quotas import NamespaceQuotas, NamespaceUsage
from tikk.store.quotas import QuotaStore
from tikk.store.sqlite.quotas import SqliteQuotaStore


async def stored(b: QuotaBackend, namespace: str = "default") -> int:
    return (await b.quotas.usage(namespace)).tasks_stored


async def test_a_namespace_without_quotas_has_none(quota_backend: QuotaBackend) -> None:
    assert await quota_backend.quotas.get("nobody") == NamespaceQuotas()
    assert await quota_backend.quotas.usage("nobody") == NamespaceUsage(0)


async def test_put_replaces_every_quota_of_the_namespace(quota_backend: QuotaBackend) -> None:
    q = quota_backend.quotas
    await q.put("a", NamespaceQuotas(tasks_per_second=5, tasks_stored=100), T0)
    await q.put("b", NamespaceQuotas(schedules=3), T0)
    assert await q.get("a") == NamespaceQuotas(tasks_per_second=5, tasks_stored=100)
    await q.put("a", NamespaceQuotas(import_streams=2), T0 + 1)
    assert await q.get("a") == NamespaceQuotas(import_streams=2)
    assert await q.get("b") == NamespaceQuotas(schedules=3)


async def test_usage_counts_created_tasks_once_per_namespace(quota_backend: QuotaBackend) -> None:
    tasks = quota_backend.tasks
    await tasks.create_many([make_task("a"), make_task("b"), make_task("c", namespace="other")])
    await tasks.create(make_task("a"))  # the same task again: not created, not counted
    await tasks.create_many([make_task(f"n{i}") for i in range(5)], new_ids=True)
    assert await stored(quota_backend) == 7
    assert await stored(quota_backend, "other") == 1


async def test_finished_tasks_leave_the_usage_and_redriven_ones_return(
    quota_backend: QuotaBackend,
) -> None:
    tasks = quota_backend.tasks
    a, b, c, d, e = (make_task(t, max_attempts=2) for t in "abcde")
    await tasks.create_many([a, b, c, d, e])
    await tasks.cancel("default", "a", ManualClock(T0))
    await tasks.mark_dispatched([b.entry(), c.entry(), d.entry()], b.due_ms)
    assert await tasks.succeed_many([b.entry()], b.due_ms + 1) == [True]
    assert await tasks.succeed_many([b.entry()], b.due_ms + 2) == [False]  # stale: no change
    await tasks.finish_attempt("default", "c", 1, Succeed(), c.due_ms + 1)
    await tasks.finish_attempt("default", "d", 1, RetryAt(d.due_ms + 60_000, "E", "m"),
                               d.due_ms + 1)  # fmt: skip
    assert await stored(quota_backend) == 2  # d waits for its retry, e is scheduled
    dead = await tasks.finish_attempt("default", "e", 9, DeadLetter("E", "m"), T0)
    assert dead is None  # not dispatched at that attempt: nothing moves
    await tasks.mark_dispatched([e.entry()], e.due_ms)
    await tasks.finish_attempt("default", "e", 1, DeadLetter("E", "m"), e.due_ms + 1)
    assert await stored(quota_backend) == 1
    await tasks.redrive("default", "e", e.due_ms + 2)
    assert await stored(quota_backend) == 2


async def test_put_usage_corrects_a_drifted_count(quota_backend: QuotaBackend) -> None:
    await quota_backend.tasks.create_many([make_task("a"), make_task("b")])
    await quota_backend.quotas.put_usage("default", NamespaceUsage(tasks_stored=5))
    assert await stored(quota_backend) == 5
    await quota_backend.quotas.put_usage("default", NamespaceUsage(tasks_stored=2))
    assert await stored(quota_backend) == 2


async def counted(quotas: QuotaStore, namespace: str) -> tuple[int, int, int]:
    """Every part of a recount: unfinished tasks found, rows read, calls made."""
    part, found, read, calls = 0, 0, 0, 0
    while part >= 0:
        counted = await quotas.count_open(namespace, part)
        assert counted.next_part == -1 or counted.next_part > part
        found, read, calls = found + counted.open_tasks, read + counted.read, calls + 1
        part = counted.next_part
    return found, read, calls


async def test_a_recount_counts_the_unfinished_tasks_part_by_part(
    quota_backend: QuotaBackend,
) -> None:
    tasks = quota_backend.tasks
    made = [make_task(f"t{i:03}") for i in range(150)]
    await tasks.create_many([*made, make_task("z", namespace="other")])
    await tasks.cancel("default", "t000", ManualClock(T0))
    await tasks.mark_dispatched([made[1].entry()], made[1].due_ms)  # dispatched: still open
    await quota_backend.quotas.put_usage("default", NamespaceUsage(tasks_stored=40))  # drifted
    found, read, calls = await counted(quota_backend.quotas, "default")
    assert found == 149 and read >= 150
    assert calls >= 1 if quota_backend.url.startswith("sqlite") else calls == 32
    assert (await counted(quota_backend.quotas, "other"))[0] == 1


async def test_sqlite_counts_tasks_stored_before_usage_was_kept(tmp_path: object) -> None:
    # A file written by a release without usage counting: its open tasks are counted once,
    # when a store first opens it.
    from pathlib import Path

    from tikk.store.sqlite.tasks import SqliteTaskStore

    path = str(Path(str(tmp_path)) / "old.db")
    old = SqliteTaskStore(path)
    await old.start()
    await old.create_many([make_task("a"), make_task("b"), make_task("c", namespace="x")])
    await old.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE task_usage")
        conn.execute("DELETE FROM store_meta WHERE key='task_usage'")
    quotas = SqliteQuotaStore(path)
    await quotas.start()
    try:
        assert (await quotas.usage("default")).tasks_stored == 2
        assert (await quotas.usage("x")).tasks_stored == 1
    finally:
        await quotas.close()


async def test_a_second_of_rate_is_granted_up_to_its_quota_then_nothing(
    quota_backend: QuotaBackend,
) -> None:
    q, second = quota_backend.quotas, T0 // 1000
    assert await q.draw_rate("default", second, 6, 10) == 6
    assert await q.draw_rate("default", second, 6, 10) == 4  # what is left of the second
    assert await q.draw_rate("default", second, 1, 10) == 0
    assert await q.draw_rate("other", second, 10, 10) == 10  # each namespace its own
    assert await q.draw_rate("default", second + 1, 12, 10) == 10  # never over the quota
    assert await q.draw_rate("default", second + 2, 3, 0) == 0


async def test_every_process_on_one_database_draws_from_one_allowance(
    quota_backend: QuotaBackend,
) -> None:
    """Two processes' stores (here, two stores of one database) drawing at once never take
    more than the quota of a second together."""
    other = await open_backend(QUOTA_STORES, quota_backend.url, Drivers())
    try:
        second = T0 // 1000 + 100
        stores = [quota_backend.quotas, other] * 10
        granted = await asyncio.gather(*(s.draw_rate("default", second, 7, 100) for s in stores))
        assert sum(granted) <= 100 and all(g in (0, 1, 2, 3, 4, 5, 6, 7) for g in granted)
        rest = await other.draw_rate("default", second, 100, 100)
        assert sum(granted) + rest == 100
    finally:
        await other.close()
