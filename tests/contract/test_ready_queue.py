"""The ready-queue contract: producer (dispatcher side) and consumer (worker side) together.

Every test runs against each backend. What only one backend promises is tested apart: the
embedded queue's leases at the bottom of this file, Kafka's offsets, rebalances and poison
counting in ``test_kafka_queue.py``.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from server.wiring import READY_QUEUES, Drivers, build
from tests.contract.conftest import QueuePair
from tests.factories import T0, make_task
from tikk.clock import ManualClock
from tikk.errors import BackendUnavailable
from tikk.model import Delivery
from tikk.ready_queue import QueueBacklog, ReadyQueue
from tikk.v1 import worker_pb2
from worker_sdk.queues.consumer import Message, QueueConsumer

local_only = pytest.mark.parametrize("queue_pair", ["local"], indirect=True)


def delivery(task_id: str, queue: str = "q", fired_ms: int = T0) -> Delivery:
    return Delivery(make_task(task_id, queue=queue).entry(), fired_ms)


async def fetch_until(
    consumer: QueueConsumer, want: int, max_messages: int = 100, timeout_s: float = 10.0
) -> list[Message]:
    """Fetch until at least ``want`` messages arrived, or ``timeout_s`` passed (then fewer)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got += await consumer.fetch(max_messages)
        if len(got) < want:
            await asyncio.sleep(0.02)  # the poll interval of this wait
    return got


def fired(messages: list[Message]) -> list[int]:
    return [m.delivery.fired_time.ToMilliseconds() for m in messages]


async def test_ping_answers_while_started_and_is_unavailable_once_closed(
    queue_pair: QueuePair,
) -> None:
    await queue_pair.producer.ping()
    await queue_pair.producer.ping()  # idempotent, and it made no queue
    assert await queue_pair.producer.backlog() == []
    other = another_producer(queue_pair)
    await other.start()
    await other.ping()
    await other.close()
    with pytest.raises(BackendUnavailable):
        await other.ping()


async def test_a_kafka_queue_whose_brokers_do_not_answer_starts_and_its_ping_says_so() -> None:
    # A port nobody listens on: the queue starts anyway (a server must start during a Kafka
    # outage), and its ping names what failed.
    from dispatcher.ready_queue.kafka import KafkaReadyQueue

    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    queue = KafkaReadyQueue.from_url(f"kafka://127.0.0.1:{port}")
    await queue.start()
    try:
        with pytest.raises(BackendUnavailable, match="kafka: ping failed"):
            await asyncio.wait_for(queue.ping(), 30)
    finally:
        await queue.close()


async def test_published_deliveries_arrive_intact(queue_pair: QueuePair) -> None:
    consumer = await queue_pair.consumer(["q"])
    await queue_pair.producer.publish([delivery("a", fired_ms=1_700_000_000_123)])
    (msg,) = await fetch_until(consumer, 1)
    d = msg.delivery
    assert (d.task_id, d.queue, d.handler, d.payload) == ("a", "q", "h", b"p")
    assert d.fired_time.ToMilliseconds() == 1_700_000_000_123
    assert d.idempotency_key == make_task("a").idempotency_key
    assert msg.delivery_count == 1


TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


async def test_the_dispatch_trace_context_travels_with_the_delivery(
    queue_pair: QueuePair,
) -> None:
    consumer = await queue_pair.consumer(["q"])
    await queue_pair.producer.publish([Delivery(make_task("a").entry(), T0, TRACE)])
    (msg,) = await fetch_until(consumer, 1)
    assert dict(msg.delivery.trace_context) == TRACE


async def test_consumers_only_see_their_queues(queue_pair: QueuePair) -> None:
    email = await queue_pair.consumer(["email"])
    await queue_pair.producer.publish(
        [delivery("a", "email"), delivery("b", "sms"), delivery("c", "email")]
    )
    msgs = await fetch_until(email, 2)
    msgs += await email.fetch(10)
    assert sorted(m.delivery.task_id for m in msgs) == ["a", "c"]


async def test_a_message_goes_to_one_consumer_of_the_group_at_a_time(
    queue_pair: QueuePair,
) -> None:
    c1, c2 = await queue_pair.consumer(["q"]), await queue_pair.consumer(["q"])
    await queue_pair.settle(c1, c2)
    await queue_pair.producer.publish([delivery(f"t{i}") for i in range(10)])
    got: list[Message] = []
    deadline = time.monotonic() + 10
    while len(got) < 10 and time.monotonic() < deadline:
        got += await c1.fetch(6) + await c2.fetch(6)
    got += await c1.fetch(6) + await c2.fetch(6)
    assert sorted(m.delivery.task_id for m in got) == sorted(f"t{i}" for i in range(10))


async def test_committed_message_is_not_delivered_again(queue_pair: QueuePair) -> None:
    first = await queue_pair.consumer(["q"], visibility_ms=1)
    await queue_pair.producer.publish([delivery("a", fired_ms=T0)])
    (msg,) = await fetch_until(first, 1)
    await first.commit(msg)
    await first.commit(msg)  # committing twice is harmless
    await first.close()  # a restart
    second = await queue_pair.consumer(["q"], visibility_ms=1)
    # Same task, so the same partition on Kafka: were the first message still there, it
    # would come before (or with) this one.
    await queue_pair.producer.publish([delivery("a", fired_ms=T0 + 1)])
    assert fired(await fetch_until(second, 1)) == [T0 + 1]


async def test_uncommitted_message_of_a_dead_consumer_is_delivered_again(
    queue_pair: QueuePair,
) -> None:
    dying = await queue_pair.consumer(["q"], visibility_ms=200)
    await queue_pair.producer.publish([delivery("a")])
    (first,) = await fetch_until(dying, 1)
    await dying.close()  # a worker that died without committing
    other = await queue_pair.consumer(["q"], visibility_ms=200)
    (again,) = await fetch_until(other, 1)
    assert again.delivery == first.delivery
    assert again.delivery_count == 2


async def test_out_of_order_commit_keeps_the_earlier_message(queue_pair: QueuePair) -> None:
    worker = await queue_pair.consumer(["q"], visibility_ms=200)
    await queue_pair.producer.publish([delivery("a", fired_ms=T0), delivery("a", fired_ms=T0 + 1)])
    slow, fast = sorted(await fetch_until(worker, 2), key=lambda m: fired([m]))
    await worker.commit(fast)  # the later message finished first; then the worker died
    await worker.close()
    other = await queue_pair.consumer(["q"], visibility_ms=200)
    again = await fetch_until(other, 1)
    assert fired(again)[0] == T0  # the unfinished one comes back (maybe followed by the other)
    assert again[0].delivery == slow.delivery


async def test_dead_letters_arrive_on_the_dead_letter_stream(queue_pair: QueuePair) -> None:
    watcher = await queue_pair.consumer(["q.dlq"])
    await queue_pair.producer.publish_dead_letter(delivery("a"), "Boom", "it broke")
    (msg,) = await fetch_until(watcher, 1)
    record = worker_pb2.DeadLetterRecord.FromString(msg.body)
    assert (record.delivery.task_id, record.delivery.queue) == ("a", "q")
    assert (record.error_type, record.error_message) == ("Boom", "it broke")


async def test_consumer_before_producer_sees_nothing_then_messages(
    queue_pair: QueuePair,
) -> None:
    early = await queue_pair.consumer(["q"])
    assert await early.fetch(5) == []
    await queue_pair.producer.publish([delivery("a")])
    assert len(await fetch_until(early, 1)) == 1


# Preparing queues, and what waits in them.


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def another_producer(pair: QueuePair) -> ReadyQueue:
    """A second producer on the pair's backend, as another process would open it (not
    started yet)."""
    return build(READY_QUEUES, "queue_url", pair.url, 1, Drivers())


def waiting(backlog: list[QueueBacklog]) -> dict[str, tuple[int, bool]]:
    """queue -> (messages waiting, whether an oldest time is known)."""
    return {b.queue: (b.waiting, b.oldest_enqueued_ms is not None) for b in backlog}


async def test_prepare_is_idempotent_and_a_prepared_queue_is_listed_empty(
    queue_pair: QueuePair,
) -> None:
    await queue_pair.producer.prepare(["email", "sms"])
    await queue_pair.producer.prepare(["email"])
    assert waiting(await queue_pair.producer.backlog()) == {
        "email": (0, False),
        "sms": (0, False),
    }


async def test_a_prepared_queue_takes_deliveries_and_dead_letters(queue_pair: QueuePair) -> None:
    await queue_pair.producer.prepare(["q"])
    consumer, watcher = await queue_pair.consumer(["q"]), await queue_pair.consumer(["q.dlq"])
    await queue_pair.producer.publish([delivery("a")])
    await queue_pair.producer.publish_dead_letter(delivery("b"), "Boom", "it broke")
    assert [m.delivery.task_id for m in await fetch_until(consumer, 1)] == ["a"]
    assert len(await fetch_until(watcher, 1)) == 1


async def test_backlog_counts_what_is_published_until_it_is_committed(
    queue_pair: QueuePair,
) -> None:
    producer = queue_pair.producer
    await producer.prepare(["q", "idle"])
    before = wall_ms()
    await producer.publish([delivery(f"t{i}", fired_ms=before) for i in range(3)])
    await producer.publish([delivery("x", "nobody", fired_ms=before)])
    await producer.publish_dead_letter(delivery("d"), "Boom", "it broke")
    after = wall_ms()
    backlog = await producer.backlog()
    assert waiting(backlog) == {"q": (3, True), "nobody": (1, True), "idle": (0, False)}
    oldest = {b.queue: b.oldest_enqueued_ms for b in backlog}
    assert before <= (oldest["q"] or 0) <= after  # dead-letter streams are not listed

    worker = await queue_pair.consumer(["q"])
    msgs = await fetch_until(worker, 3)
    assert waiting(await producer.backlog())["q"] == (3, True)  # running still waits
    for m in msgs[:2]:
        await worker.commit(m)
    assert waiting(await producer.backlog())["q"] == (1, True)
    for m in msgs[2:]:
        await worker.commit(m)
    assert waiting(await producer.backlog()) == {
        "q": (0, False),
        "nobody": (1, True),
        "idle": (0, False),
    }


async def test_backlog_reports_queues_asked_about_and_those_another_producer_filled(
    queue_pair: QueuePair,
) -> None:
    other = another_producer(queue_pair)
    try:
        await other.start()
        await other.publish([delivery("a", "elsewhere", fired_ms=wall_ms())])
    finally:
        await other.close()
    backlog = await queue_pair.producer.backlog(["asked"])
    assert waiting(backlog) == {"asked": (0, False), "elsewhere": (1, True)}


# The embedded queue's leases: a message is invisible while leased, for visibility_ms. The
# consumers' clock is a manual one, so a lease runs out when the test says, with no sleep.


@local_only
async def test_a_leased_message_is_invisible_until_its_lease_runs_out(
    queue_pair: QueuePair,
) -> None:
    clock = ManualClock(T0)
    holder = await queue_pair.consumer(["q"], visibility_ms=200, clock=clock)
    other = await queue_pair.consumer(["q"], visibility_ms=200, clock=clock)
    await queue_pair.producer.publish([delivery("a")])
    (first,) = await holder.fetch(1)
    clock.advance(199)
    assert await other.fetch(1) == []  # still leased
    clock.advance(1)
    (again,) = await other.fetch(1)
    assert again.delivery == first.delivery
    assert (first.delivery_count, again.delivery_count) == (1, 2)


@local_only
async def test_extend_keeps_the_lease(queue_pair: QueuePair) -> None:
    clock = ManualClock(T0)
    holder = await queue_pair.consumer(["q"], visibility_ms=300, clock=clock)
    other = await queue_pair.consumer(["q"], visibility_ms=300, clock=clock)
    await queue_pair.producer.publish([delivery("a")])
    (msg,) = await holder.fetch(1)
    for _ in range(4):  # twice the lease in all
        clock.advance(150)
        await holder.extend([msg])
        assert await other.fetch(1) == []
    clock.advance(300)  # no longer extended: the lease runs out
    (again,) = await other.fetch(1)
    assert again.delivery == msg.delivery


@local_only
async def test_commit_of_an_expired_lease_does_not_remove_the_new_one(
    queue_pair: QueuePair,
) -> None:
    clock = ManualClock(T0)
    slow = await queue_pair.consumer(["q"], visibility_ms=100, clock=clock)
    fast = await queue_pair.consumer(["q"], visibility_ms=60_000, clock=clock)
    await queue_pair.producer.publish([delivery("a")])
    (stale,) = await slow.fetch(1)
    clock.advance(100)
    (fresh,) = await fast.fetch(1)
    await slow.commit(stale)  # too late: the message belongs to `fast` now
    clock.advance(60_000)  # so it is still there when `fast`'s lease runs out too
    (again,) = await fast.fetch(1)
    assert again.delivery == fresh.delivery and again.delivery_count == 3
    await fast.commit(again)
    clock.advance(60_000)
    assert await fast.fetch(1) == []  # gone, not merely leased
