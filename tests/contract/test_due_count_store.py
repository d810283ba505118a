"""The DueCountStore contract (tikk.store.due_counts), against every backend; and the server's
counting of what it writes (``server.ops.upcoming``) over each."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.ops.upcoming import UpcomingCounts
from server.wiring import DUE_COUNT_STORES, Drivers
from tests.contract import cassandra_keyspace
from tests.contract.conftest import backend_url, open_backend
from tests.factories import T0, make_task
from tikk.clock import ManualClock
from tikk.model import TaskState
from tikk.store.due_counts import DueCount, DueCountStore

MINUTE = T0 // 60_000
DAY_END = (MINUTE // 1_440 + 1) * 1_440 - 1  # the last minute of T0's day


@pytest.fixture(params=["sqlite", "cassandra"])
async def counts(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: cassandra_keyspace.TestKeyspace
) -> AsyncIterator[DueCountStore]:
    store = await open_backend(
        DUE_COUNT_STORES, backend_url(request.param, tmp_path, keyspace), Drivers()
    )
    yield store
    await store.close()


async def test_deltas_add_up_per_minute_and_queue(counts: DueCountStore) -> None:
    await counts.add({("shop", MINUTE, "email"): 3, ("shop", MINUTE, "sms"): 1})
    await counts.add({("shop", MINUTE, "email"): 2, ("shop", MINUTE + 5, "email"): 4})
    await counts.add({("shop", MINUTE, "sms"): -1, ("other", MINUTE, "email"): 9})
    found = await counts.counts("shop", MINUTE, MINUTE + 59)
    assert found == [DueCount(MINUTE, "email", 5), DueCount(MINUTE + 5, "email", 4)]
    assert await counts.counts("shop", MINUTE + 1, MINUTE + 4) == []
    assert await counts.counts("nobody", MINUTE, MINUTE + 59) == []


async def test_a_window_across_midnight_reads_both_days(counts: DueCountStore) -> None:
    await counts.add({("shop", DAY_END, "q"): 1, ("shop", DAY_END + 1, "q"): 2})
    assert await counts.counts("shop", DAY_END - 10, DAY_END + 10) == [
        DueCount(DAY_END, "q", 1), DueCount(DAY_END + 1, "q", 2)
    ]  # fmt: skip


async def test_the_server_counts_creates_and_cancels_and_shows_what_it_has_not_written(
    counts: DueCountStore,
) -> None:
    clock = ManualClock((MINUTE - 1) * 60_000)  # the minute before: MINUTE is the next one
    upcoming = UpcomingCounts(counts, clock)
    due = [make_task(f"t{i}", due_ms=(MINUTE + i % 3) * 60_000 + 5) for i in range(9)]
    upcoming.scheduled(due)
    upcoming.scheduled([due[0]], -1)  # cancelled
    upcoming.scheduled([due[1].evolve(state=TaskState.SUCCEEDED)])  # not waiting: not counted
    unwritten = await upcoming.coming("default", 60)
    await upcoming.flush()
    assert await upcoming.coming("default", 60) == unwritten == [
        DueCount(MINUTE, "q", 2), DueCount(MINUTE + 1, "q", 3), DueCount(MINUTE + 2, "q", 3)
    ]  # fmt: skip
    clock.advance(60_000)  # a minute on: MINUTE is the current one now, being dispatched
    assert [c.minute for c in await upcoming.coming("default", 60)] == [MINUTE + 1, MINUTE + 2]
