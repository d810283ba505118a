"""Deliveries as a dispatcher signed and published them, taken off the embedded queue the
way a worker takes them: what tests that report results by hand need."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from tests.waiting import eventually_async
from tikk.v1 import worker_pb2
from worker_sdk.queues.local import LocalQueueConsumer


async def taken_off_queue(
    queue_file: Path, queue: str, task_ids: Collection[str], timeout_s: float = 60
) -> dict[str, worker_pb2.Delivery]:
    """The deliveries of ``task_ids`` in ``queue`` of the local queue file, by task id, each
    committed (so nothing else runs it). Others met on the way are taken too."""
    consumer = LocalQueueConsumer(str(queue_file), [queue], 60_000)
    await consumer.start()
    taken: dict[str, worker_pb2.Delivery] = {}

    async def arrived() -> bool:
        for message in await consumer.fetch(16):
            await consumer.commit(message)
            taken[message.delivery.task_id] = message.delivery
        return set(task_ids) <= taken.keys()

    try:
        await eventually_async(arrived, timeout_s, every_s=0.05, what=f"{task_ids} dispatched")
    finally:
        await consumer.close()
    return taken
