"""Deliveries that arrive before they are due (the dispatcher's lead, ``worker_sdk.lead``): a
real Worker on the embedded queue, asking a real ``WorkerService`` on loopback
(``tests.worker_server``, which tells this machine's time) for its config, holds each one until
the server's clock reaches its due time, whatever the worker's own clock says, and holds them
without taking handler slots."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from tests.factories import make_task
from tests.waiting import eventually_async
from tests.worker_server import WorkerServer
from tikk.model import Delivery
from worker_sdk import TaskContext, Worker
from worker_sdk.inflight import Held, InFlight


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ShiftedClock:
    """The worker's wall clock, set ``shift_ms`` off this machine's."""

    def __init__(self, shift_ms: int) -> None:
        self.shift_ms = shift_ms

    def now_ms(self) -> int:
        return now_ms() + self.shift_ms


def early(task_id: str, due_ms: int) -> Delivery:
    """A delivery fired now and due at ``due_ms``."""
    entry = dataclasses.replace(make_task(task_id, queue="q").entry(), due_ms=due_ms)
    return Delivery(entry, now_ms())


async def started_at(
    worker: Worker, server: WorkerServer, queue: LocalReadyQueue, deliveries: list[Delivery]
) -> dict[str, int]:
    """When (this machine's clock) each delivery's handler started, published once the
    worker is up."""
    started: dict[str, int] = {}

    @worker.handler("h")
    async def record(ctx: TaskContext, payload: bytes) -> None:
        started[ctx.task_id] = now_ms()
        await asyncio.sleep(0.2)  # holds its slot a while

    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(server.address, stop=stop))
    await eventually_async(lambda: server.config_calls > 0, 30, what="worker configured")
    await queue.publish(deliveries)
    await eventually_async(lambda: len(started) == len(deliveries), 30, what="all started")
    stop.set()
    async with asyncio.timeout(60):
        await running
    return started


@pytest.mark.parametrize("shift_ms", [0, 2_000, -2_000], ids=["right", "ahead", "behind"])
async def test_an_early_delivery_starts_at_its_due_time_by_the_servers_clock(
    queue: LocalReadyQueue, server: WorkerServer, shift_ms: int
) -> None:
    # A clock 2 s ahead would start these 2 s early by its own reading, one 2 s behind 2 s
    # late: the worker's bound of the server's clock starts them on time either way.
    worker = Worker(queues=["q"], concurrency=4, wall_clock=ShiftedClock(shift_ms))
    due = now_ms() + 1_500
    started = await started_at(worker, server, queue, [early("a", due), early("b", due + 300)])
    assert due <= started["a"] < due + 1_000
    assert due + 300 <= started["b"] < due + 1_300
    assert worker.server_clock.measured
    assert abs(worker.server_clock.offset_ms() + shift_ms) < 1_000


async def test_without_the_servers_time_the_workers_own_clock_holds_them(
    queue: LocalReadyQueue, server: WorkerServer
) -> None:
    server.tells_time = False  # an older server
    worker = Worker(queues=["q"], concurrency=4)
    due = now_ms() + 1_000
    started = await started_at(worker, server, queue, [early("a", due)])
    assert due <= started["a"]
    assert not worker.server_clock.measured


async def test_early_deliveries_hold_no_handler_slot(
    queue: LocalReadyQueue, server: WorkerServer
) -> None:
    # One slot, three deliveries due in 1.5 s ahead of one due now: the one due now starts at
    # once, and the three start at their due time one after another as the slot frees.
    worker = Worker(queues=["q"], concurrency=1)
    due = now_ms() + 1_500
    held = [early(f"e{i}", due) for i in range(3)]
    started = await started_at(worker, server, queue, [*held, early("now", now_ms())])
    assert started["now"] < due
    assert all(due <= started[f"e{i}"] for i in range(3))
    assert sorted(started[f"e{i}"] for i in range(3))[-1] >= due + 2 * 200  # one at a time


async def test_a_worker_that_steps_aside_drops_its_early_runs() -> None:
    inflight = InFlight(limit=2)
    forever = asyncio.get_running_loop().create_future()

    async def early_run() -> None:
        await inflight.hold_early(asyncio.shield(forever))

    runs = [asyncio.create_task(early_run()) for _ in range(5)]
    for run in runs:
        inflight.add(run, Held(None, None))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert (inflight.early, inflight.running, inflight.free) == (5, 0, 2)
    assert inflight.drop_early() == 5
    await asyncio.gather(*runs, return_exceptions=True)
    assert (len(inflight), inflight.early, inflight.free) == (0, 0, 2)
    forever.cancel()
