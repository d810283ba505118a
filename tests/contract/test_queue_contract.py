"""The producer and the consumer agree on the wire (``tikk.queue_contract``), on each backend:
what the dispatcher's ready queue writes is found and read whole by the worker's consumer, and
what the consumer commits in one batch (``commit_many``, the way a Worker commits) is gone from
what the producer counts as waiting.

What needs no service (URL parsing, names, the backend switch) is in
``tests/unit/test_queue_contract.py``; these run the real embedded queue and the real Kafka of
``python -m devtools stack up`` (skipped without it).
"""

from __future__ import annotations

import pytest

from tests.contract.conftest import QueuePair
from tests.contract.test_ready_queue import TRACE, delivery, fetch_until, fired, waiting
from tests.factories import T0, make_task
from tikk.model import Delivery
from tikk.queue_contract import TRACE_KEYS, dead_letter_queue, trace_carrier
from tikk.v1 import worker_pb2

kafka_only = pytest.mark.parametrize("queue_pair", ["kafka"], indirect=True)
W3C = {**TRACE, "tracestate": "vendor=abc"}  # both keys of the contract


async def test_the_worker_continues_the_trace_the_dispatcher_sent(queue_pair: QueuePair) -> None:
    consumer = await queue_pair.consumer(["q"])
    await queue_pair.producer.publish([Delivery(make_task("a").entry(), T0, W3C)])
    (msg,) = await fetch_until(consumer, 1)
    assert dict(msg.delivery.trace_context) == W3C
    assert trace_carrier(msg.headers, msg.delivery.trace_context) == W3C


@kafka_only
async def test_the_record_headers_the_producer_writes_are_the_ones_the_consumer_reads(
    queue_pair: QueuePair,
) -> None:
    consumer = await queue_pair.consumer(["q"])
    await queue_pair.producer.publish([Delivery(make_task("a").entry(), T0, W3C)])
    (msg,) = await fetch_until(consumer, 1)
    assert sorted(msg.headers) == sorted(TRACE_KEYS)  # every header of the record, as read
    assert trace_carrier(msg.headers, {}) == W3C  # from the headers alone


async def test_dead_letters_go_to_the_stream_the_contract_names(queue_pair: QueuePair) -> None:
    watcher = await queue_pair.consumer([dead_letter_queue("q")])
    await queue_pair.producer.publish_dead_letter(delivery("a"), "Boom", "it broke")
    (msg,) = await fetch_until(watcher, 1)
    record = worker_pb2.DeadLetterRecord.FromString(msg.body)
    assert (record.delivery.task_id, record.error_type) == ("a", "Boom")


@kafka_only
async def test_the_producer_reads_the_group_the_workers_of_a_queue_form(
    queue_pair: QueuePair,
) -> None:
    consumer = await queue_pair.consumer(["q"])
    await queue_pair.settle(consumer)
    await queue_pair.producer.publish([delivery("a")])
    (msg,) = await fetch_until(consumer, 1)
    backlog = {b.queue: b for b in await queue_pair.producer.backlog()}
    assert (backlog["q"].waiting, backlog["q"].consumers) == (1, 1)
    await consumer.commit(msg)  # committed in the group the producer looks at
    backlog = {b.queue: b for b in await queue_pair.producer.backlog()}
    assert (backlog["q"].waiting, backlog["q"].consumers) == (0, 1)


# Batched commits: one transaction (embedded) or one request per queue (Kafka), same rules.


async def test_a_batch_commit_takes_every_message_of_every_queue_out_once(
    queue_pair: QueuePair,
) -> None:
    producer = queue_pair.producer
    await producer.prepare(["q", "r"])
    await producer.publish([delivery(f"t{i}", queue) for i in range(6) for queue in ("q", "r")])
    worker = await queue_pair.consumer(["q", "r"])
    batch = await fetch_until(worker, 12)
    assert waiting(await producer.backlog()) == {"q": (6, True), "r": (6, True)}
    await worker.commit_many(batch[::-1])  # finished in any order
    await worker.commit_many(batch)  # again: harmless
    await worker.commit_many([])
    assert waiting(await producer.backlog()) == {"q": (0, False), "r": (0, False)}
    await worker.close()  # a restart finds nothing of the batch
    again = await queue_pair.consumer(["q", "r"], visibility_ms=1)
    await producer.publish([delivery("t0", "q", fired_ms=T0 + 1)])
    assert fired(await fetch_until(again, 1)) == [T0 + 1]


async def test_a_batch_commit_never_passes_a_message_left_out_of_it(
    queue_pair: QueuePair,
) -> None:
    """Messages of one task (one partition on Kafka) finished out of order: the ones left out
    of the batch, whose results the server has not acknowledged, are delivered again."""
    worker = await queue_pair.consumer(["q"], visibility_ms=200)
    await queue_pair.producer.publish([delivery("a", fired_ms=T0 + i) for i in range(4)])
    m0, m1, m2, m3 = sorted(await fetch_until(worker, 4), key=lambda m: fired([m]))
    await worker.commit_many([m3, m1])
    await worker.close()  # the worker died before m0 and m2 were acknowledged
    other = await queue_pair.consumer(["q"], visibility_ms=200)
    again = await fetch_until(other, 4, timeout_s=3)
    assert again[0].delivery == m0.delivery  # the oldest unfinished one comes back first
    assert set(fired([m0, m2])) <= set(fired(again))  # every unfinished one comes back


async def test_a_batch_commit_after_close_does_nothing(queue_pair: QueuePair) -> None:
    first = await queue_pair.consumer(["q"], visibility_ms=200)
    await queue_pair.settle(first)
    await queue_pair.producer.publish([delivery("a"), delivery("b")])
    batch = await fetch_until(first, 2)
    await first.close()
    await first.commit_many(batch)  # runs that finished after their worker stepped aside
    second = await queue_pair.consumer(["q"], visibility_ms=200)
    again = await fetch_until(second, 2, timeout_s=20)
    assert sorted(m.delivery.task_id for m in again) == ["a", "b"]
