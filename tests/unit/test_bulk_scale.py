"""The bulk verbs at scale on the embedded store: cancel by label, then re-drive and purge of
dead letters by error type, each over ``TIKK_BULK_SCALE_TASKS`` tasks (20,000 in the suite;
100,000 by hand: ``TIKK_BULK_SCALE_TASKS=100000 pytest -s tests/unit/test_bulk_scale.py``).
Every verb must act on each match once and leave nothing else touched; the rates print."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from server.wiring import Backends
from tests.embedded_api import embedded_api, embedded_settings
from tests.factories import make_task
from tests.waiting import eventually_async
from tikk.clock import SystemClock
from tikk.model import DeadLetter, Task, TaskState
from tikk.v1 import bulk_pb2, bulk_pb2_grpc

SIZE = int(os.environ.get("TIKK_BULK_SCALE_TASKS", "20000"))
NS = "scale"


@dataclasses.dataclass
class Scale:
    bulk: bulk_pb2_grpc.BulkServiceStub
    backends: Backends


@pytest.fixture
async def scale(tmp_path: Path) -> AsyncIterator[Scale]:
    async with embedded_api(embedded_settings(tmp_path)) as served:
        yield Scale(bulk_pb2_grpc.BulkServiceStub(served.channel), served.backends)


def tasks(prefix: str, n: int, queue: str, labels: dict[str, str]) -> list[Task]:
    now = SystemClock().now_ms()
    return [
        dataclasses.replace(
            make_task(f"{prefix}{i:07}", namespace=NS, queue=queue, due_ms=now + 3_600_000,
                      created_ms=now),
            labels=labels,
        )
        for i in range(n)
    ]  # fmt: skip


async def store_all(s: Scale, made: Sequence[Task]) -> None:
    for at in range(0, len(made), 5_000):
        await s.backends.store.create_many(made[at : at + 5_000], new_ids=True)


async def run(s: Scale, method: str, f: bulk_pb2.TaskFilter) -> tuple[bulk_pb2.BulkAction, float]:
    """The action ``method`` over ``f``, to its end; and how long it took."""
    began = time.perf_counter()
    action = await getattr(s.bulk, method)(bulk_pb2.BulkActionRequest(filter=f))
    get = bulk_pb2.GetBulkActionRequest(namespace=NS, id=action.id)

    async def ended() -> bulk_pb2.BulkAction | None:
        now = await s.bulk.GetBulkAction(get)
        return now if now.state != bulk_pb2.BULK_ACTION_STATE_RUNNING else None

    done: bulk_pb2.BulkAction = await eventually_async(ended, 600, 0.2, what=f"{method} ended")
    took = time.perf_counter() - began
    print(f"{method} of {SIZE:,}: {done.acted:,} in {took:.1f} s ({done.acted / took:,.0f}/s)")
    return done, took


async def test_a_bulk_cancel_by_label_acts_on_every_match_once(scale: Scale) -> None:
    await store_all(scale, tasks("a", SIZE, "email", {"customer": "acme"}))
    await store_all(scale, tasks("b", 100, "email", {"customer": "bolt"}))
    f = bulk_pb2.TaskFilter(namespace=NS, label_selector="customer=acme")
    began = time.perf_counter()
    preview = await scale.bulk.BulkCancelTasks(bulk_pb2.BulkActionRequest(filter=f, dry_run=True))
    print(f"dry run of {SIZE:,}: {1000 * (time.perf_counter() - began):.0f} ms")
    assert (preview.matched, preview.complete, len(preview.sample)) == (SIZE, True, 10)
    done, _ = await run(scale, "BulkCancelTasks", f)
    assert (done.matched, done.acted, done.skipped, done.failed) == (SIZE, SIZE, 0, 0)
    store = scale.backends.store
    left = await store.count_by_label(NS, ("customer", "acme"), TaskState.SCHEDULED, SIZE)
    assert left == (0, True)
    assert await store.count_by_label(NS, ("customer", "bolt"), TaskState.SCHEDULED, 200) == (
        100, True,
    )  # fmt: skip


async def test_dead_letters_are_redriven_and_purged_by_error_type(scale: Scale) -> None:
    made = tasks("d", SIZE, "billing", {})
    await store_all(scale, made)
    store = scale.backends.store
    await store.mark_dispatched([t.entry() for t in made], made[0].created_ms)
    for i, t in enumerate(made):
        error = DeadLetter("TimeoutError" if i % 2 else "ValueError", "upstream down")
        await store.finish_attempt(NS, t.task_id, 1, error, t.created_ms + 1 + i)
    timeouts = bulk_pb2.TaskFilter(namespace=NS, queue="billing", error_type="TimeoutError")
    redriven, _ = await run(scale, "BulkRedriveTasks", timeouts)
    assert (redriven.matched, redriven.acted, redriven.failed) == (SIZE // 2, SIZE // 2, 0)
    values = bulk_pb2.TaskFilter(namespace=NS, queue="billing", error_type="ValueError")
    purged, _ = await run(scale, "BulkPurgeTasks", values)
    assert (purged.matched, purged.acted, purged.failed) == (SIZE - SIZE // 2, SIZE - SIZE // 2, 0)
    assert (await store.get(NS, made[1].task_id)).state is TaskState.SCHEDULED
    left = await store.list_dead_letters(NS, "billing", 10, "", SystemClock().now_ms())
    assert left.items == []
