"""A worker commits in batches, and only what the server acknowledged: a real Worker on the
real embedded queue (an SQLite file), reporting to a real ``WorkerService`` on loopback
(``tests.worker_server``)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from dispatcher.ready_queue.local import LocalReadyQueue
from tests.contract.test_ready_queue import delivery, fetch_until, waiting
from tests.factories import T0
from tests.waiting import eventually_async
from tests.worker_server import WorkerServer
from tikk.clock import ManualClock
from worker_sdk import TaskContext, Worker
from worker_sdk.commits import CommitBatcher
from worker_sdk.queues.local import LocalQueueConsumer


async def until_waiting(queue: LocalReadyQueue, count: int, timeout_s: float = 10) -> None:
    """Poll the backlog until ``count`` messages of queue ``q`` wait; fail after ``timeout_s``."""

    async def reached() -> bool:
        return waiting(await queue.backlog())["q"][0] == count

    await eventually_async(reached, timeout_s, what=f"{count} waiting")


def recording_worker(ran: Counter[str], **options: float) -> Worker:
    worker = Worker(queues=["q"], concurrency=16, **options)  # type: ignore[arg-type]

    @worker.handler("h")
    async def record(ctx: TaskContext, payload: bytes) -> None:
        ran[ctx.task_id] += 1

    return worker


async def test_a_burst_is_run_recorded_and_committed_whole(
    queue: LocalReadyQueue, server: WorkerServer
) -> None:
    tasks = {f"t{i}" for i in range(300)}
    await queue.publish([delivery(t) for t in sorted(tasks)])
    ran: Counter[str] = Counter()
    async with asyncio.timeout(60):
        completed = await recording_worker(ran).run(server.address, burst=True)
    assert completed == len(tasks)
    assert set(ran) == tasks and set(ran.values()) == {1}
    assert server.acked_tasks == tasks
    assert waiting(await queue.backlog()) == {"q": (0, False)}  # the last batch went out too


async def test_a_result_the_server_never_acknowledged_is_never_committed(
    queue: LocalReadyQueue, server: WorkerServer
) -> None:
    server.script = [("finish", 1)] * 10_000  # every call ends without acknowledging
    await queue.publish([delivery(f"t{i}") for i in range(5)])
    ran: Counter[str] = Counter()
    worker = recording_worker(ran, shutdown_timeout_s=0.2)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(server.address, stop=stop))
    await eventually_async(lambda: len(ran) == 5 and server.calls > 3, 30)
    stop.set()
    async with asyncio.timeout(30):
        assert await running == 0
    assert server.acked == set()
    assert waiting(await queue.backlog()) == {"q": (5, True)}  # all still to be delivered


async def test_the_batcher_commits_through_each_message_s_own_consumer(
    queue: LocalReadyQueue, tmp_path: Path
) -> None:
    path = str(tmp_path / "queue.db")
    gone, live = LocalQueueConsumer(path, ["q"], 60_000), LocalQueueConsumer(path, ["q"], 60_000)
    await gone.start()
    await live.start()
    await queue.publish([delivery(f"t{i}") for i in range(6)])
    held = await fetch_until(gone, 2, max_messages=2) + await fetch_until(live, 4)
    await gone.close()  # a worker that stepped aside: its commits do nothing
    batcher = CommitBatcher(linger_s=0.01)
    batcher.start()
    for message in held[:4]:
        batcher.add(gone if message in held[:2] else live, message)
    await until_waiting(queue, 4)  # the flusher commits without being asked
    batcher.add(live, held[4])
    batcher.add(live, held[5])
    await batcher.close()
    await live.close()
    assert waiting(await queue.backlog()) == {"q": (2, True)}  # the closed consumer's two


async def test_closing_the_batcher_commits_what_waits_without_waiting_out_the_linger(
    queue: LocalReadyQueue, tmp_path: Path
) -> None:
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    await consumer.start()
    await queue.publish([delivery(f"t{i}") for i in range(3)])
    batcher = CommitBatcher(linger_s=3600)
    batcher.start()
    for message in await fetch_until(consumer, 3):
        batcher.add(consumer, message)
    await asyncio.sleep(0)  # the flusher is lingering now
    async with asyncio.timeout(10):
        await batcher.close()
    await consumer.close()
    assert waiting(await queue.backlog()) == {"q": (0, False)}


async def test_the_workers_wall_clock_is_the_one_its_local_queue_leases_by(
    queue: LocalReadyQueue, server: WorkerServer
) -> None:
    # Visible at T0 + 60 s: long past by the system clock, not yet by the worker's.
    await queue.publish([delivery("later", fired_ms=T0 + 60_000)])
    clock = ManualClock(T0)
    ran: Counter[str] = Counter()
    worker = Worker(queues=["q"], wall_clock=clock)

    @worker.handler("h")
    async def record(ctx: TaskContext, payload: bytes) -> None:
        ran[ctx.task_id] += 1

    async with asyncio.timeout(60):
        assert await worker.run(server.address, burst=True) == 0  # nothing visible yet
        clock.advance(60_000)
        assert await worker.run(server.address, burst=True) == 1
    assert ran == {"later": 1}
