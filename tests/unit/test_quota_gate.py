"""The tasks_stored check of ``QuotaGate`` when creates overlap in one process: a write that
ends while another create's usage count is being read must still count, whether the read
saw it or not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.ops.quotas import QuotaGate
from tests.factories import T0
from tikk.clock import ManualClock
from tikk.errors import ResourceExhausted
from tikk.quotas import NamespaceQuotas, NamespaceUsage
from tikk.settings import QuotaSettings
from tikk.store.sqlite.quotas import SqliteQuotaStore
from tikk.store.sqlite.schedules import SqliteScheduleStore

NS = "default"


class SlowUsage(SqliteQuotaStore):
    """The embedded quota store whose next usage read, once ``hold`` is called, returns the
    count it read only when ``release`` is called: a read that began before a write ended
    and returns after it."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._held: asyncio.Event | None = None
        self.reading, self.released = asyncio.Event(), asyncio.Event()

    def hold(self) -> None:
        self._held = self.released

    def release(self) -> None:
        self.released.set()

    async def usage(self, namespace: str) -> NamespaceUsage:
        counted = await super().usage(namespace)
        held, self._held = self._held, None
        if held is not None:
            self.reading.set()
            await held.wait()
        return counted

    async def count(self, namespace: str, n: int) -> None:
        """Count ``n`` created tasks, as the task store does in the create's transaction."""
        usage = await super().usage(namespace)
        await self.put_usage(namespace, NamespaceUsage(tasks_stored=usage.tasks_stored + n))


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[tuple[QuotaGate, SlowUsage]]:
    db = str(tmp_path / "tikk.db")
    store, schedules = SlowUsage(db), SqliteScheduleStore(db)
    await store.start()
    await schedules.start()
    settings = QuotaSettings(defaults=NamespaceQuotas(tasks_stored=5))
    yield QuotaGate(store, schedules, ManualClock(T0), settings), store
    await schedules.close()
    await store.close()


async def create(gate: QuotaGate, store: SlowUsage, n: int) -> None:
    async with gate.creating({NS: n}):
        await store.count(NS, n)


async def test_a_write_ending_during_a_usage_read_still_counts(
    parts: tuple[QuotaGate, SlowUsage],
) -> None:
    gate, store = parts
    store.hold()
    late = asyncio.create_task(create(gate, store, 3))  # reads 0 stored, then waits
    await asyncio.wait_for(store.reading.wait(), 10)
    await create(gate, store, 3)  # admitted and written while that read is out
    store.release()
    with pytest.raises(ResourceExhausted, match="quota tasks_stored of namespace 'default'"):
        await late
    assert (await store.usage(NS)).tasks_stored == 3


async def test_writes_that_ended_before_the_read_are_not_counted_twice(
    parts: tuple[QuotaGate, SlowUsage],
) -> None:
    gate, store = parts
    await create(gate, store, 3)
    await create(gate, store, 2)  # 3 stored + 2 = the quota: admitted
    with pytest.raises(ResourceExhausted, match="5 stored and not finished, 1 more asked"):
        await create(gate, store, 1)
    assert (await store.usage(NS)).tasks_stored == 5
