"""The embedded queue's doorbell (``tikk.queue_doorbell``): a publish wakes the consumers that
listen, a dead listener is taken down, and an idle Worker fetches on the ring instead of on
its poll. Real Unix sockets, the real queue file and a real ``WorkerService`` on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from pathlib import Path

from dispatcher.ready_queue.local import LocalReadyQueue
from tests.contract.test_ready_queue import delivery
from tests.waiting import eventually_async
from tests.worker_server import WorkerServer
from tikk.queue_doorbell import Doorbell, DoorbellRinger, bells_folder
from worker_sdk import TaskContext, Worker
from worker_sdk.queues.local import LocalQueueConsumer


async def test_a_ring_wakes_every_listener_once_per_burst_of_rings(tmp_path: Path) -> None:
    path = str(tmp_path / "queue.db")
    woken: Counter[str] = Counter()
    bells = [Doorbell(path), Doorbell(path)]
    assert bells[0].open(lambda: woken.update(["a"]))
    assert bells[1].open(lambda: woken.update(["b"]))
    ringer = DoorbellRinger(path)
    assert [ringer.ring() for _ in range(3)] == [2, 2, 2]
    await eventually_async(lambda: set(woken) == {"a", "b"}, 5, what="both woken")
    assert max(woken.values()) <= 3  # pending rings are read together, never more wakes
    for bell in bells:
        bell.close()
    ringer.close()
    assert list(bells_folder(path).iterdir()) == []  # a closed bell leaves nothing behind


async def test_a_bell_whose_process_died_is_taken_down_by_the_next_ring(tmp_path: Path) -> None:
    path = str(tmp_path / "queue.db")
    folder = bells_folder(path)
    folder.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(folder / "1-dead.sock"))
    dead.close()  # as after kill -9: the file stays, nobody listens
    live = Doorbell(path)
    woken = asyncio.Event()
    assert live.open(woken.set)
    ringer = DoorbellRinger(path)
    assert ringer.ring() == 1
    assert not (folder / "1-dead.sock").exists()
    async with asyncio.timeout(5):
        await woken.wait()
    live.close()
    ringer.close()


def test_a_queue_whose_bell_path_would_be_too_long_polls_instead(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120) / "queue.db"
    assert Doorbell(str(deep)).open(lambda: None) is False
    assert Doorbell(":memory:").open(lambda: None) is False
    assert DoorbellRinger(str(deep)).ring() == 0  # no folder: nobody to ring, no error


async def test_a_publish_wakes_a_local_consumer(queue: LocalReadyQueue, tmp_path: Path) -> None:
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    await consumer.start()
    woken = asyncio.Event()
    assert consumer.on_arrival(woken.set)
    await queue.publish([delivery("a")])
    async with asyncio.timeout(5):
        await woken.wait()
    assert [m.delivery.task_id for m in await consumer.fetch(10)] == ["a"]
    await consumer.close()
    assert list(bells_folder(str(tmp_path / "queue.db")).iterdir()) == []


async def test_an_idle_worker_starts_a_published_task_on_the_ring_not_the_poll(
    queue: LocalReadyQueue, server: WorkerServer, tmp_path: Path
) -> None:
    started: list[float] = []
    worker = Worker(queues=["q"], poll_interval_s=60.0)  # a poll would come far too late

    @worker.handler("h")
    async def record(ctx: TaskContext, payload: bytes) -> None:
        started.append(asyncio.get_running_loop().time())

    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(server.address, stop=stop))
    await eventually_async(lambda: any(bells_folder(str(tmp_path / "queue.db")).glob("*.sock")),
                           10, what="the worker listening")  # fmt: skip
    await asyncio.sleep(0.2)  # it found nothing and is idle now
    published = asyncio.get_running_loop().time()
    await queue.publish([delivery("a")])
    await eventually_async(lambda: len(started) == 1, 10, what="the task started")
    stop.set()
    async with asyncio.timeout(10):
        await running
    assert started[0] - published < 5.0  # generous; a poll would take 60 s
