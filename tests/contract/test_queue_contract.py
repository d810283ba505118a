"""The producer and the consumer agree on the wire (``tikk.queue_contract``), on each backend:
what the dispatcher's ready queue writes is found and read whole by the worker's consumer.

What needs no service (URL parsing, names, the backend switch) is in
``tests/unit/test_queue_contract.py``; these run the real embedded queue and the real Kafka of
``tikk stack up`` (skipped without it).
"""

from __future__ import annotations

import pytest

from tests.contract.conftest import QueuePair
from tests.contract.test_ready_queue import TRACE, delivery, fetch_until
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
