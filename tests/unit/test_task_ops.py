"""The one path of every create (``TaskOps.create_many``) on the embedded store and queue with
a manual clock: each item's outcome in order, a queue that cannot take tasks refusing only its
own items, ids the server chose and ids a client chose in one lot, and a quota refusing the
whole lot before anything of it is written."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from pathlib import Path

import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from server.ops.late_writes import LateWriteGuard
from server.ops.quotas import QuotaGate
from server.ops.tasks import TaskOps
from tests.factories import T0, make_task
from tests.ops_parts import quota_gate
from tikk.clock import ManualClock
from tikk.errors import AlreadyExists, FailedPrecondition, ResourceExhausted
from tikk.model import Task
from tikk.quotas import NamespaceQuotas
from tikk.store.sqlite.quotas import SqliteQuotaStore
from tikk.store.sqlite.tasks import SqliteTaskStore

SHARDS = 4


class RefusingQueue(LocalReadyQueue):
    """The embedded queue, refusing to prepare the queue named ``broken``."""

    async def prepare(self, queues: Collection[str]) -> None:
        if "broken" in queues:
            raise FailedPrecondition("queue 'broken' cannot be created")
        await super().prepare(queues)


@dataclass
class Rig:
    tasks: TaskOps
    store: SqliteTaskStore
    quotas: QuotaGate
    db: str


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    db = str(tmp_path / "tikk.db")
    store, queue = SqliteTaskStore(db, SHARDS), RefusingQueue(str(tmp_path / "queue.db"))
    await store.start()
    await queue.start()
    clock = ManualClock(T0)
    guard = LateWriteGuard(store, clock, grace_ms=5_000)
    async with quota_gate(db, clock) as quotas:
        yield Rig(TaskOps(store, queue, clock, guard=guard, quotas=quotas), store, quotas, db)
    await queue.close()
    await store.close()


def assigned(task_id: str, queue: str = "q") -> Task:
    """A task whose id the server chose: no fingerprint."""
    return make_task(task_id, queue=queue, shard_count=SHARDS).evolve(fingerprint="")


async def test_every_item_gets_its_outcome_in_order(rig: Rig) -> None:
    lot = [
        make_task("given", shard_count=SHARDS),
        assigned("fresh"),
        make_task("lost", queue="broken", shard_count=SHARDS),
        assigned("lost-too", queue="broken"),
        make_task("given", shard_count=SHARDS),  # the same create again
    ]
    outcomes = await rig.tasks.create_many(lot)
    assert [(o[0].task_id, o[1]) if isinstance(o, tuple) else type(o) for o in outcomes] == [
        ("given", True), ("fresh", True), FailedPrecondition, FailedPrecondition,
        ("given", False),
    ]  # fmt: skip
    assert (await rig.store.get("default", "fresh")).task_id == "fresh"
    page = await rig.tasks.list_tasks("default", "broken", None, 10, "")
    assert page.items == []


async def test_a_single_create_raises_its_refusal(rig: Rig) -> None:
    await rig.tasks.create(make_task("t", shard_count=SHARDS))
    with pytest.raises(AlreadyExists):
        await rig.tasks.create(make_task("t", payload=b"other", shard_count=SHARDS))
    with pytest.raises(FailedPrecondition, match="broken"):
        await rig.tasks.create(make_task("u", queue="broken", shard_count=SHARDS))


async def test_a_lot_over_a_quota_is_refused_whole_and_nothing_is_written(rig: Rig) -> None:
    await rig.quotas.quotas("default")  # warms the cache: the change below must be re-read
    await rig.tasks.create(make_task("first", shard_count=SHARDS))
    admin = SqliteQuotaStore(rig.db)  # an admin's change, from another connection
    await admin.start()
    await admin.put("default", NamespaceQuotas(tasks_stored=2), T0)
    await admin.close()
    rig.quotas.forget("default")
    lot = [make_task("a", shard_count=SHARDS), assigned("b")]
    with pytest.raises(ResourceExhausted, match="tasks_stored"):
        await rig.tasks.create_many(lot)
    listed = await rig.tasks.list_tasks("default", "q", None, 10, "")
    assert [t.task_id for t in listed.items] == ["first"]
