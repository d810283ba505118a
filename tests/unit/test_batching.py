"""Coalescing of concurrent submits into batch writes (server.ops.coalescing)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from server.ops.coalescing import Coalescer
from tests.waiting import eventually_async
from tikk.errors import BackendUnavailable


class Store:
    """Records each batch; a batch waits for ``release`` so others can pile up meanwhile."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        self.fail_on = fail_on

    async def write(self, items: Sequence[int]) -> None:
        self.batches.append(list(items))
        await self.release.wait()
        if self.fail_on in items:
            raise BackendUnavailable("store down")


async def test_a_lone_item_is_written_at_once_and_later_ones_gather() -> None:
    store = Store()
    c = Coalescer(store.write, in_flight=1)
    first = asyncio.create_task(c.submit(0))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(c.submit(i)) for i in range(1, 6)]
    await asyncio.sleep(0)
    assert store.batches == [[0]]  # the rest wait for the one slot
    store.release.set()
    await asyncio.gather(first, *rest)
    assert store.batches == [[0], [1, 2, 3, 4, 5]]


async def test_batches_are_capped_and_slots_run_side_by_side() -> None:
    store = Store()
    c = Coalescer(store.write, max_items=2, in_flight=2)
    subs = [asyncio.create_task(c.submit(i)) for i in range(5)]
    await eventually_async(lambda: len(store.batches) >= 2, 10, what="both slots writing")
    assert store.batches == [[0, 1], [2, 3]]
    store.release.set()
    await asyncio.gather(*subs)
    assert sorted(i for b in store.batches for i in b) == [0, 1, 2, 3, 4]


async def test_a_failed_write_fails_only_its_own_batch() -> None:
    store = Store(fail_on=0)
    c = Coalescer(store.write, in_flight=1)
    first = asyncio.create_task(c.submit(0))
    await asyncio.sleep(0)
    second = asyncio.create_task(c.submit(1))
    store.release.set()
    with pytest.raises(BackendUnavailable):
        await first
    await second
    assert store.batches == [[0], [1]]
