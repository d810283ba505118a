"""What only the Kafka ready queue promises: URL and naming, offsets committed past the
contiguous prefix of finished messages, rebalances, and poison counting in commit metadata.

The shared contract is ``test_ready_queue.py``, and what both sides must agree on (the URL,
names, headers) ``test_queue_contract.py``. The ledger tests need no broker; the others talk to
the real one (``python -m devtools stack up``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from dispatcher.ready_queue.kafka import KafkaReadyQueue
from tests.contract.conftest import QueuePair
from tests.contract.test_ready_queue import delivery, fetch_until, fired
from tests.factories import T0, make_task
from tests.services import KAFKA, require
from tikk.errors import BackendUnavailable, InvalidArgument
from tikk.model import Delivery
from tikk.queue_contract import KafkaQueueUrl
from worker_sdk.queues import kafka_lane, open_consumer
from worker_sdk.queues.consumer import Message
from worker_sdk.queues.kafka import KafkaQueueConsumer
from worker_sdk.queues.kafka_ledger import PartitionLedger


@pytest.fixture
async def kafka_pair(request: pytest.FixtureRequest) -> AsyncIterator[QueuePair]:
    """A Kafka queue pair; parametrise indirectly with the partition count (default 4)."""
    pair = QueuePair.kafka(require("kafka", KAFKA), getattr(request, "param", 4))
    try:
        await pair.start()
        yield pair
    finally:
        await pair.close()


async def committed(url: str, queue: str) -> dict[int, tuple[int, str]]:
    """partition -> (offset, metadata) committed by the workers' group of ``queue``."""
    config = KafkaQueueUrl.from_url(url)
    admin = AIOKafkaAdminClient(**config.client_options())
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(config.group(queue))
    finally:
        await admin.close()
    topic = config.topic(queue)
    return {tp.partition: (om.offset, om.metadata) for tp, om in found.items() if tp.topic == topic}


def by_fired(messages: list[Message]) -> list[Message]:
    return sorted(messages, key=lambda m: fired([m]))


async def test_open_consumer_picks_kafka_and_does_no_io() -> None:
    consumer = open_consumer("kafka://127.0.0.1:1?prefix=x.", ["q"], 30_000)
    assert isinstance(consumer, KafkaQueueConsumer)
    await consumer.close()


async def test_an_unreachable_broker_is_backend_unavailable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = KafkaReadyQueue.from_url("kafka://127.0.0.1:1")
    await queue.start()  # a producer starts (a server must answer) and says why it cannot send
    assert "not reachable" in caplog.text
    with pytest.raises(BackendUnavailable):
        await queue.publish([delivery("a")])  # still unreachable: the connect is tried again
    await queue.close()
    consumer = KafkaQueueConsumer.from_url("kafka://127.0.0.1:1", ["q"])
    with pytest.raises(BackendUnavailable):
        await consumer.start()
    with pytest.raises(BackendUnavailable):
        await consumer.start()  # may be awaited again after it failed
    await consumer.close()


# The ledger: which offset may be committed (pure, no broker).


def test_ledger_commits_only_past_the_contiguous_prefix_of_finished_messages() -> None:
    ledger = PartitionLedger(epoch=1, committed=10)
    assert [ledger.hand_out(o) for o in (10, 11, 12)] == [1, 1, 1]
    assert ledger.target() == (10, "started:10:1")  # the head's start, before it runs
    ledger.mark_committed(10, "started:10:1")
    assert ledger.finish(12) and ledger.finish(11)
    assert ledger.target() is None  # 10 is still running: nothing may move
    assert ledger.finish(10)
    assert ledger.target() == (13, "")
    assert not ledger.covers(10)
    ledger.mark_committed(13, "")
    assert ledger.covers(12) and not ledger.covers(13)  # a commit waiting for 12 may stop
    assert not ledger.finish(11)  # a second commit of a message is a no-op
    assert ledger.target() is None


def test_ledger_moves_the_head_record_along_and_skips_offset_gaps() -> None:
    ledger = PartitionLedger(epoch=1)  # nothing committed yet
    for offset in (5, 7, 9):  # gaps: offsets need not be contiguous
        ledger.hand_out(offset)
    assert ledger.target() == (5, "started:5:1")
    ledger.finish(5)
    assert ledger.target() == (7, "started:7:1")
    ledger.finish(9)
    ledger.finish(7)
    assert ledger.target() == (10, "")


def test_ledger_never_commits_backwards() -> None:
    ledger = PartitionLedger(epoch=1, committed=10)
    ledger.hand_out(4)  # e.g. the committed offset fell out of the log and reset to earliest
    assert ledger.target() is None
    ledger.finish(4)
    assert ledger.target() is None


@pytest.mark.parametrize(
    ("metadata", "count"),
    [("started:10:3", 4), ("started:9:3", 1), ("", 1), ("something else", 1), ("started:10:", 1)],
)
def test_ledger_counts_restarts_of_the_committed_message(metadata: str, count: int) -> None:
    ledger = PartitionLedger(epoch=1, committed=10, metadata=metadata)
    assert ledger.hand_out(10) == count
    assert ledger.target() == (10, f"started:10:{count}")
    assert ledger.hand_out(11) == 1  # only the message at the committed offset was restarted


# Against the broker.


@pytest.mark.parametrize("kafka_pair", [3], indirect=True)
async def test_topics_are_created_on_first_use_by_either_side(kafka_pair: QueuePair) -> None:
    worker = await kafka_pair.consumer(["email"])
    await kafka_pair.settle(worker)  # the worker came first and created its topic
    await kafka_pair.producer.publish([delivery("a", "email"), delivery("b", "sms")])
    config = KafkaQueueUrl.from_url(kafka_pair.url)
    admin = AIOKafkaAdminClient(**config.client_options())
    await admin.start()
    try:
        topics = await admin.describe_topics([config.topic("email"), config.topic("sms")])
    finally:
        await admin.close()
    assert [(t["topic"], len(t["partitions"])) for t in topics] == [
        (config.topic("email"), 3),
        (config.topic("sms"), 3),
    ]


async def topic_partitions(url: str, topics: list[str]) -> dict[str, int]:
    """topic -> partition count, for those of ``topics`` that exist. A topic just created
    may take a moment to reach every broker's metadata: read until all are seen, or 10 s."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        found = await _described(url, topics)
        if len(found) == len(topics) or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.2)  # the poll interval of this wait


async def _described(url: str, topics: list[str]) -> dict[str, int]:
    config = KafkaQueueUrl.from_url(url)
    admin = AIOKafkaAdminClient(**config.client_options())
    await admin.start()
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    return {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}


@pytest.mark.parametrize("kafka_pair", [3], indirect=True)
async def test_prepare_creates_the_queue_topic_and_its_dead_letter_topic(
    kafka_pair: QueuePair,
) -> None:
    config = KafkaQueueUrl.from_url(kafka_pair.url)
    await kafka_pair.producer.prepare(["email"])
    expected = {config.topic("email"): 3, config.topic("email.dlq"): 3}
    assert await topic_partitions(kafka_pair.url, list(expected)) == expected
    second = KafkaReadyQueue.from_url(kafka_pair.url)  # another server: already there is fine
    try:
        await second.start()
        await second.prepare(["email"])
        await second.prepare(["email"])
    finally:
        await second.close()


async def test_a_topic_name_kafka_refuses_is_a_clear_error_and_creates_nothing(
    kafka_pair: QueuePair,
) -> None:
    config = KafkaQueueUrl.from_url(kafka_pair.url)
    await kafka_pair.producer.prepare(["a.b"])  # an older version's name
    with pytest.raises(InvalidArgument) as err:
        await kafka_pair.producer.prepare(["a_b"])
    assert err.value.field == "queue"
    assert repr(config.topic("a_b")) in str(err.value) and "collides" in str(err.value)
    with pytest.raises(InvalidArgument, match="longer than the max allowed length"):
        await kafka_pair.producer.prepare(["x" * 250])
    assert await topic_partitions(kafka_pair.url, [config.topic("a_b")]) == {}
    with pytest.raises(BackendUnavailable, match=repr(config.topic("a_b"))):
        await kafka_pair.producer.publish([delivery("t", "a_b")])  # an old task of that name
    await kafka_pair.producer.publish([delivery("t", "fine")])  # other queues still go out


async def test_prepare_and_backlog_on_an_unreachable_broker_are_backend_unavailable() -> None:
    queue = KafkaReadyQueue.from_url("kafka://127.0.0.1:1")
    await queue.start()
    with pytest.raises(BackendUnavailable):
        await queue.prepare(["q"])
    with pytest.raises(BackendUnavailable):
        await queue.backlog()
    await queue.close()


async def test_backlog_counts_the_members_of_the_queue_group_and_lists_old_names(
    kafka_pair: QueuePair,
) -> None:
    await kafka_pair.producer.prepare(["a.b"])
    worker = await kafka_pair.consumer(["q"])
    await kafka_pair.settle(worker)
    members = {b.queue: b.consumers for b in await kafka_pair.producer.backlog()}
    assert members == {"q": 1, "a.b": 0}
    await worker.close()  # leaves the group
    assert {b.queue: b.consumers for b in await kafka_pair.producer.backlog()}["q"] == 0


async def test_trace_context_is_sent_as_standard_message_headers(kafka_pair: QueuePair) -> None:
    trace = {"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", "tracestate": "k=v"}
    worker = await kafka_pair.consumer(["q"])
    await kafka_pair.producer.publish([Delivery(make_task("a").entry(), T0, trace)])
    (msg,) = await fetch_until(worker, 1)
    assert msg.headers == trace


def test_only_text_headers_reach_the_message() -> None:
    headers = [("traceparent", b"00-ab-cd-01"), ("blob", b"\xff\xfe"), ("empty", None)]
    assert kafka_lane._text_headers(headers) == {"traceparent": "00-ab-cd-01"}


@pytest.mark.parametrize("kafka_pair", [1], indirect=True)
async def test_out_of_order_commits_advance_only_the_contiguous_prefix(
    kafka_pair: QueuePair,
) -> None:
    worker = await kafka_pair.consumer(["q"])
    await kafka_pair.producer.publish([delivery(f"t{i}", fired_ms=T0 + i) for i in range(3)])
    m0, m1, m2 = by_fired(await fetch_until(worker, 3))
    assert await committed(kafka_pair.url, "q") == {0: (0, "started:0:1")}
    await worker.extend([m0])  # nothing to renew on Kafka, and harmless
    await worker.commit(m2)
    await worker.commit(m1)
    assert await committed(kafka_pair.url, "q") == {0: (0, "started:0:1")}
    await worker.commit(m0)
    assert await committed(kafka_pair.url, "q") == {0: (3, "")}


@pytest.mark.parametrize("kafka_pair", [2], indirect=True)
async def test_a_rebalance_hands_unfinished_work_over_and_ignores_late_commits(
    kafka_pair: QueuePair,
) -> None:
    c1 = await kafka_pair.consumer(["q"])
    tasks = [f"t{i}" for i in range(8)]  # these keys land on both partitions
    await kafka_pair.producer.publish([delivery(t) for t in tasks])
    old = {m.delivery.task_id: m for m in await fetch_until(c1, 8)}
    assert await committed(kafka_pair.url, "q") == {0: (0, "started:0:1"), 1: (0, "started:0:1")}

    c2 = await kafka_pair.consumer(["q"])
    await kafka_pair.settle(c1, c2)  # each owns one partition now, in a new assignment
    again = {c1: await fetch_until(c1, 1), c2: await fetch_until(c2, 1)}
    deadline = time.monotonic() + 10
    while sum(map(len, again.values())) < 8 and time.monotonic() < deadline:
        again = {c: got + await c.fetch(10) for c, got in again.items()}  # all 8 come back
    assert sorted(m.delivery.task_id for got in again.values() for m in got) == tasks
    for got in again.values():
        assert sorted(m.delivery_count for m in got) == [1] * (len(got) - 1) + [2]  # the head

    for m in again[c1]:  # late: handed out before the rebalance, to the same consumer
        await c1.commit(old[m.delivery.task_id])
    assert await committed(kafka_pair.url, "q") == {0: (0, "started:0:2"), 1: (0, "started:0:2")}
    for consumer, got in again.items():
        for m in got:
            await consumer.commit(m)
    offsets = await committed(kafka_pair.url, "q")
    assert sorted(offsets.values()) == sorted((len(got), "") for got in again.values())


@pytest.mark.parametrize("kafka_pair", [1], indirect=True)
async def test_a_message_that_keeps_killing_workers_is_counted_in_commit_metadata(
    kafka_pair: QueuePair,
) -> None:
    await kafka_pair.producer.publish([delivery("poison")])
    for n in (1, 2, 3):
        worker = await kafka_pair.consumer(["q"])
        (msg,) = await fetch_until(worker, 1)
        assert msg.delivery_count == n
        # Recorded before it was handed out: a kill -9 right now would still count.
        assert await committed(kafka_pair.url, "q") == {0: (0, f"started:0:{n}")}
        await worker.close()  # the worker dies before reporting
    survivor = await kafka_pair.consumer(["q"])
    (msg,) = await fetch_until(survivor, 1)
    assert msg.delivery_count == 4
    await survivor.commit(msg)  # what the Worker does once it dead-lettered it
    assert await committed(kafka_pair.url, "q") == {0: (1, "")}


async def test_fetch_returns_at_most_max_messages_and_does_not_wait(
    kafka_pair: QueuePair,
) -> None:
    worker = await kafka_pair.consumer(["q"])
    await kafka_pair.settle(worker)
    started = time.monotonic()
    assert await worker.fetch(5) == []
    assert time.monotonic() - started < 0.2
    await kafka_pair.producer.publish([delivery(f"t{i}") for i in range(20)])
    got: list[Message] = []
    deadline = time.monotonic() + 10
    while len(got) < 20 and time.monotonic() < deadline:
        batch = await worker.fetch(5)
        assert len(batch) <= 5
        got += batch
    assert sorted(m.delivery.task_id for m in got) == sorted(f"t{i}" for i in range(20))


async def test_each_queue_is_its_own_group(kafka_pair: QueuePair) -> None:
    both = await kafka_pair.consumer(["email", "sms"])
    email_only = await kafka_pair.consumer(["email"])
    await kafka_pair.settle(both, email_only)  # email split between them, sms all to `both`
    emails, texts = [f"e{i}" for i in range(12)], ["s0", "s1"]
    await kafka_pair.producer.publish(
        [delivery(t, "email") for t in emails] + [delivery(t, "sms") for t in texts]
    )
    got_both: list[Message] = []
    got_email: list[Message] = []
    deadline = time.monotonic() + 10
    while len(got_both) + len(got_email) < 14 and time.monotonic() < deadline:
        got_both += await both.fetch(10)
        got_email += await email_only.fetch(10)
    ids = sorted(m.delivery.task_id for m in got_both + got_email)
    assert ids == sorted(emails + texts)  # every message exactly once
    assert {m.delivery.queue for m in got_email} == {"email"}
    assert got_email and {m.delivery.queue for m in got_both} == {"email", "sms"}


async def test_a_large_batch_is_published_and_consumed_whole(kafka_pair: QueuePair) -> None:
    batch = [delivery(f"t{i}", fired_ms=T0 + i) for i in range(2000)]
    started = time.monotonic()
    await kafka_pair.producer.publish(batch)
    assert time.monotonic() - started < 10
    worker = await kafka_pair.consumer(["q"])
    got = await fetch_until(worker, 2000, max_messages=500)
    assert sorted(fired(got)) == [T0 + i for i in range(2000)]


@pytest.mark.parametrize("kafka_pair", [1], indirect=True)
async def test_a_client_that_rewinds_below_the_commit_hands_out_nothing_again(
    kafka_pair: QueuePair,
) -> None:
    # After a broker froze and came back, the client can believe nothing was committed and
    # reset to the earliest offset; the ledger knows the commit and skips what is done.
    worker = await kafka_pair.consumer(["q"])
    assert isinstance(worker, KafkaQueueConsumer)
    await kafka_pair.producer.publish([delivery(f"old{i}", fired_ms=T0 + i) for i in range(5)])
    for m in await fetch_until(worker, 5):
        await worker.commit(m)
    assert await committed(kafka_pair.url, "q") == {0: (5, "")}
    lane = worker._lanes[0]
    await lane._consumer.seek_to_beginning()  # what the client does on such a reset
    await kafka_pair.producer.publish([delivery(f"new{i}", fired_ms=T0 + 10 + i) for i in range(2)])
    again = await fetch_until(worker, 2)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        again += await worker.fetch(10)
    assert sorted(m.delivery.task_id for m in again) == ["new0", "new1"]
