"""The ready-queue contract: producer (dispatcher side) and consumer (worker side) together."""

from __future__ import annotations

import asyncio

from tests.contract.conftest import QueuePair
from tests.factories import T0, make_task
from tikk.model import Delivery


def delivery(task_id: str, queue: str = "q", fired_ms: int = T0) -> Delivery:
    return Delivery(make_task(task_id, queue=queue).entry(), fired_ms)


async def fetch_until(pair_consumer: object, want: int, max_messages: int = 100) -> list[object]:
    got: list[object] = []
    for _ in range(100):
        got += await pair_consumer.fetch(max_messages)  # type: ignore[attr-defined]
        if len(got) >= want:
            break
        await asyncio.sleep(0.02)
    return got


async def test_published_deliveries_arrive_intact(queue_pair: QueuePair) -> None:
    consumer = queue_pair.consumer(["q"])
    await queue_pair.producer.publish([delivery("a", fired_ms=1_700_000_000_123)])
    (msg,) = await consumer.fetch(10)
    d = msg.delivery
    assert (d.task_id, d.queue, d.handler, d.payload) == ("a", "q", "h", b"p")
    assert d.fired_time.ToMilliseconds() == 1_700_000_000_123
    assert d.idempotency_key == make_task("a").idempotency_key
    assert msg.delivery_count == 1


async def test_consumers_only_see_their_queues(queue_pair: QueuePair) -> None:
    email = queue_pair.consumer(["email"])
    await queue_pair.producer.publish([delivery("a", "email"), delivery("b", "sms")])
    msgs = await email.fetch(10)
    assert [m.delivery.task_id for m in msgs] == ["a"]


async def test_leased_message_is_not_handed_out_twice(queue_pair: QueuePair) -> None:
    c1, c2 = queue_pair.consumer(["q"]), queue_pair.consumer(["q"])
    await queue_pair.producer.publish([delivery(f"t{i}") for i in range(10)])
    a, b = await c1.fetch(6), await c2.fetch(6)
    ids = [m.delivery.task_id for m in a + b]
    assert sorted(ids) == sorted(f"t{i}" for i in range(10))


async def test_committed_message_is_gone(queue_pair: QueuePair) -> None:
    c = queue_pair.consumer(["q"], visibility_ms=1)
    await queue_pair.producer.publish([delivery("a")])
    (msg,) = await c.fetch(1)
    await c.commit(msg)
    await asyncio.sleep(0.05)
    assert await c.fetch(10) == []


async def test_uncommitted_message_is_delivered_again_after_its_lease(
    queue_pair: QueuePair,
) -> None:
    dying = queue_pair.consumer(["q"], visibility_ms=200)
    await queue_pair.producer.publish([delivery("a")])
    (first,) = await dying.fetch(1)
    await dying.close()  # a worker that died without committing
    other = queue_pair.consumer(["q"], visibility_ms=200)
    assert await other.fetch(1) == []  # still leased
    (again,) = await fetch_until(other, 1)
    assert again.delivery == first.delivery  # type: ignore[attr-defined]
    assert again.delivery_count == 2  # type: ignore[attr-defined]


async def test_extend_keeps_the_lease(queue_pair: QueuePair) -> None:
    holder = queue_pair.consumer(["q"], visibility_ms=300)
    other = queue_pair.consumer(["q"], visibility_ms=300)
    await queue_pair.producer.publish([delivery("a")])
    (msg,) = await holder.fetch(1)
    for _ in range(4):
        await asyncio.sleep(0.15)
        await holder.extend([msg])
        assert await other.fetch(1) == []
    await holder.commit(msg)


async def test_commit_of_an_expired_lease_does_not_remove_the_new_one(
    queue_pair: QueuePair,
) -> None:
    slow = queue_pair.consumer(["q"], visibility_ms=100)
    fast = queue_pair.consumer(["q"], visibility_ms=60_000)
    await queue_pair.producer.publish([delivery("a")])
    (stale,) = await slow.fetch(1)
    (fresh,) = await fetch_until(fast, 1)
    await slow.commit(stale)  # too late: the message belongs to `fast` now
    await fast.commit(fresh)  # type: ignore[arg-type]
    assert await fast.fetch(1) == []


async def test_consumer_before_producer_sees_nothing_then_messages(
    queue_pair: QueuePair,
) -> None:
    early = queue_pair.consumer(["q"])
    assert await early.fetch(5) == []
    await queue_pair.producer.publish([delivery("a")])
    assert len(await early.fetch(5)) == 1
