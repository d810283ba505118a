"""Static membership on the Kafka ready queue (``GroupTiming.instance_id``): a worker restarted
under its instance id, within the session, takes its partitions back while the other members
of the group keep theirs and go on committing what they hold, as if nothing happened.

Needs the real broker (``python -m devtools stack up``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from tests.contract.conftest import QueuePair
from tests.contract.test_kafka_queue import committed
from tests.contract.test_ready_queue import delivery
from tests.services import KAFKA, require
from tests.waiting import eventually_async
from worker_sdk.queues.consumer import GroupTiming, Message
from worker_sdk.queues.kafka import KafkaQueueConsumer
from worker_sdk.queues.kafka_lane import KafkaReceipt

PARTITIONS = 4


@pytest.fixture
async def kafka_pair() -> AsyncIterator[QueuePair]:
    pair = QueuePair.kafka(require("kafka", KAFKA), PARTITIONS)
    try:
        await pair.start()
        yield pair
    finally:
        await pair.close()


def static(pair: QueuePair, instance_id: str) -> KafkaQueueConsumer:
    timing = GroupTiming(
        session_timeout_ms=6_000, heartbeat_interval_ms=100, instance_id=instance_id
    )
    return KafkaQueueConsumer.from_url(pair.url, ["q"], timing)


async def fetch_all(consumers: list[KafkaQueueConsumer], want: int) -> dict[int, list[Message]]:
    """Fetch from every consumer until ``want`` messages arrived in all (index -> messages)."""
    got: dict[int, list[Message]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + 20
    while sum(map(len, got.values())) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            got[i] += await c.fetch(want)
        await asyncio.sleep(0.01)  # the poll interval of this wait
    assert sum(map(len, got.values())) == want
    return got


async def watch(consumer: KafkaQueueConsumer, seen: list[frozenset[tuple[str, int]]]) -> None:
    """Note every assignment ``consumer`` goes through until cancelled (its group membership
    runs in the background: a rebalance shows here, fetching or not)."""
    while True:
        if not seen or seen[-1] != consumer.assignment():
            seen.append(consumer.assignment())
        await asyncio.sleep(0.02)  # the poll interval of this watch


async def two_members(pair: QueuePair) -> tuple[KafkaQueueConsumer, KafkaQueueConsumer]:
    """Static members ``worker-1`` (the first to join, so it leads the group) and
    ``worker-2``, settled: each owns half of the partitions."""
    first = static(pair, "worker-1")
    await first.start()
    await pair.settle(first)
    second = static(pair, "worker-2")
    await second.start()
    await pair.settle(first, second)
    return first, second


async def restarted(
    pair: QueuePair, gone: KafkaQueueConsumer, instance_id: str
) -> KafkaQueueConsumer:
    """``gone`` closed (a worker killed or stopped) and started again at once under
    ``instance_id``; returned once it owns what ``gone`` owned."""
    owned = gone.assignment()
    await gone.close()
    back = static(pair, instance_id)
    await back.start()
    await eventually_async(lambda: back.assignment() == owned, 20, what="partitions back")
    return back


@pytest.mark.parametrize("which", [0, 1])
async def test_a_static_member_restarted_within_its_session_moves_no_partition_of_the_other(
    kafka_pair: QueuePair, which: int
) -> None:
    members = await two_members(kafka_pair)
    gone, stays = members[which], members[1 - which]
    owned = stays.assignment()
    await kafka_pair.producer.publish([delivery(f"t{i}") for i in range(16)])
    held = await fetch_all([gone, stays], 16)

    seen: list[frozenset[tuple[str, int]]] = []
    watcher = asyncio.create_task(watch(stays, seen))
    try:
        back = await restarted(kafka_pair, gone, f"worker-{which + 1}")
        again = await fetch_all([back], len(held[0]))  # what it had not committed comes back
    finally:
        watcher.cancel()
    assert seen == [owned]  # the other member never lost or gained a partition
    assert sorted(m.delivery.task_id for m in again[0]) == sorted(
        m.delivery.task_id for m in held[0]
    )
    # Its messages fetched before the restart are still its own to commit: no new assignment.
    await stays.commit_many(held[1])
    there = Counter(m.receipt.partition for m in held[1] if isinstance(m.receipt, KafkaReceipt))
    offsets = await committed(kafka_pair.url, "q")
    assert {p: offsets[p] for p in there} == {p: (n, "") for p, n in there.items()}
    await back.close()
    await stays.close()
