"""Both sides of the ready queue follow one contract (``tikk.queue_contract``): they read the
same URL the same way and derive the same names from it, the worker picks its backend by the
URL's scheme, and no backend does I/O before ``start``. No service needed; what needs the
real Kafka is in ``tests/contract/test_queue_contract.py``.
"""

from __future__ import annotations

import ast
import asyncio
import sys
import time
from pathlib import Path

import pytest

from dispatcher.ready_queue.kafka import KafkaReadyQueue
from dispatcher.ready_queue.local import LocalReadyQueue
from tests.factories import T0, make_task
from tikk import clock, queue_contract, urls
from tikk.errors import BackendUnavailable, InvalidArgument
from tikk.model import Delivery
from tikk.queue_contract import (
    TRACE_KEYS,
    KafkaQueueUrl,
    dead_letter_queue,
    is_new_queue_name,
    trace_carrier,
    trace_headers,
)
from worker_sdk.queues import open_consumer
from worker_sdk.queues.consumer import Message, QueueConsumer
from worker_sdk.queues.kafka import KafkaQueueConsumer
from worker_sdk.queues.local import LocalQueueConsumer

ROOT = Path(__file__).resolve().parents[2]
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def delivery(task_id: str) -> Delivery:
    return Delivery(make_task(task_id).entry(), T0)


async def fetch_until(consumer: QueueConsumer, want: int, timeout_s: float = 5.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got += await consumer.fetch(want - len(got))
        await asyncio.sleep(0.01)  # the poll interval of this wait
    return got


def both_sides(url: str) -> tuple[KafkaQueueUrl, KafkaQueueUrl]:
    """What the dispatcher's producer and the worker's consumer make of ``url``."""
    consumer = open_consumer(url, ["q"], 30_000)
    assert isinstance(consumer, KafkaQueueConsumer)
    return KafkaReadyQueue.from_url(url).config, consumer.config


# URLs: both sides read the same URL the same way.


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("kafka://k1:9092", (("k1:9092",), "tikk.", 8, 1)),
        ("kafka://k1:9092,k2:9093/", (("k1:9092", "k2:9093"), "tikk.", 8, 1)),
        ("kafka://k1:1?prefix=prod.&partitions=32&replication=3", (("k1:1",), "prod.", 32, 3)),
        ("kafka://k1:1?prefix=", (("k1:1",), "", 8, 1)),
    ],
)
def test_both_sides_parse_the_queue_url_alike(
    url: str, expected: tuple[tuple[str, ...], str, int, int]
) -> None:
    for config in both_sides(url):
        assert (config.bootstrap_servers, config.prefix, config.partitions, config.replication) == (
            expected
        )
        assert config.topic("email") == expected[1] + "email"
        assert config.group("email") == expected[1] + "workers.email"


@pytest.mark.parametrize(
    "url",
    [
        "kafka://",
        "kafka://k1",
        "kafka://k1:port",
        "kafka://k1:1/path",
        "kafka://k1:1?partitions=0",
        "kafka://k1:1?partitions=many",
        "kafka://k1:1?replication=-1",
        "kafka://k1:1?replication=2&min_insync=3",
        "kafka://k1:1?min_insync=0",
        "kafka://k1:1?prefix=bad/prefix",
        "kafka://k1:1?colour=blue",
        "kafka://k1:1?prefix=a.&prefix=b.",
        "local:///tmp/q.db",
    ],
)
def test_bad_queue_urls_are_refused_by_both_sides(url: str) -> None:
    for parse in (
        KafkaReadyQueue.from_url,
        lambda u: KafkaQueueConsumer.from_url(u, ["q"]),
    ):
        with pytest.raises(InvalidArgument) as err:
            parse(url)
        assert err.value.field == "queue_url"


@pytest.mark.parametrize(
    ("query", "min_insync"),
    [
        ("", 1),
        ("?replication=2", 1),
        ("?replication=3", 2),
        ("?replication=5", 2),
        ("?replication=3&min_insync=3", 3),
        ("?replication=5&min_insync=3", 3),
    ],
)
def test_a_topic_is_acknowledged_by_a_majority_once_it_has_three_replicas(
    query: str, min_insync: int
) -> None:
    assert KafkaQueueUrl.from_url(f"kafka://k1:1{query}").min_insync == min_insync


# Names: the producer writes where the consumer reads.


def test_producer_and_consumer_derive_the_same_topic_dead_letter_topic_and_group() -> None:
    producer, consumer = both_sides("kafka://k1:1?prefix=prod.")
    assert producer == consumer
    assert (producer.topic("email"), producer.dead_letter_topic("email")) == (
        "prod.email",
        "prod.email.dlq",
    )
    # A worker watching dead letters consumes the stream dead_letter_queue(q) like any queue.
    assert consumer.topic(dead_letter_queue("email")) == producer.dead_letter_topic("email")
    assert consumer.group("email") == "prod.workers.email"


def test_the_producer_lists_a_queue_by_its_topic_and_leaves_out_the_rest() -> None:
    config = KafkaQueueUrl.from_url("kafka://k1:1?prefix=p.")
    assert config.queue_of(config.topic("email")) == "email"
    assert config.queue_of(config.topic("a.b")) == "a.b"  # an older version's name
    assert config.queue_of(config.dead_letter_topic("email")) is None
    assert config.queue_of("other.email") is None
    assert config.queue_of("p._internal") is None


@pytest.mark.parametrize(
    ("name", "ok"),
    [("email", True), ("a-b_c9", True), ("a.b", False), ("q_dlq", False), ("_q", False),
     ("x" * 128, True), ("x" * 129, False), ("", False)],
)  # fmt: skip
def test_new_queue_names_collide_with_no_topic(name: str, ok: bool) -> None:
    assert is_new_queue_name(name) is ok


def test_trace_context_goes_in_standard_headers_and_comes_back_out() -> None:
    trace = {**TRACE, "tracestate": "k=v", "baggage": "not ours"}
    headers = trace_headers(trace)
    assert sorted(k for k, _ in headers) == sorted(TRACE_KEYS)
    read = {k: v.decode() for k, v in headers}
    assert trace_carrier(read, {}) == {k: trace[k] for k in TRACE_KEYS}
    assert trace_carrier({}, trace) == {k: trace[k] for k in TRACE_KEYS}  # the embedded queue
    assert trace_carrier({"traceparent": "from-header"}, trace) == {"traceparent": "from-header"}


# The worker's one backend switch.


def test_open_consumer_picks_the_backend_by_scheme(tmp_path: Path) -> None:
    local = open_consumer(f"local://{tmp_path}/q.db", ["q"], 30_000)
    assert isinstance(local, LocalQueueConsumer)
    kafka = open_consumer("kafka://127.0.0.1:1?prefix=x.", ["q"], 30_000)
    assert isinstance(kafka, KafkaQueueConsumer)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("sqs://queue", "'sqs'"),
        ("/var/lib/tikk/queue.db", "scheme://location"),
        ("local://", "scheme://location"),
    ],
)
def test_open_consumer_refuses_other_urls_naming_the_known_schemes(url: str, named: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        open_consumer(url, ["q"], 30_000)
    assert err.value.field == "queue_url"
    assert named in str(err.value)
    if named == "'sqs'":
        assert "known: local, kafka" in str(err.value)


# Lifecycle: constructors do no I/O, start does, and nothing runs before it.


async def test_the_embedded_queue_touches_nothing_before_start(tmp_path: Path) -> None:
    path = tmp_path / "new" / "queue.db"
    producer = LocalReadyQueue(str(path))
    consumer = open_consumer(f"local://{path}", ["q"], 30_000)
    assert not path.parent.exists()
    with pytest.raises(RuntimeError, match="start"):
        await producer.publish([delivery("a")])
    with pytest.raises(RuntimeError, match="start"):
        await consumer.fetch(1)
    await producer.start()
    await producer.start()  # idempotent
    await consumer.start()
    assert path.exists()
    await producer.publish([delivery("a")])
    assert len(await fetch_until(consumer, 1)) == 1
    await consumer.close()
    await producer.close()
    with pytest.raises(BackendUnavailable):
        await consumer.start()  # a closed consumer stays closed


async def test_a_consumer_started_before_the_producer_sees_nothing_yet(tmp_path: Path) -> None:
    consumer = open_consumer(f"local://{tmp_path}/queue.db", ["q"], 30_000)
    await consumer.start()
    assert await consumer.fetch(5) == []  # no table yet: the producer creates it
    await consumer.close()


async def test_kafka_backends_connect_only_in_start() -> None:
    producer = KafkaReadyQueue.from_url("kafka://127.0.0.1:1")
    consumer = KafkaQueueConsumer.from_url("kafka://127.0.0.1:1", ["q"])
    with pytest.raises(RuntimeError, match="start"):
        await producer.publish([delivery("a")])
    with pytest.raises(RuntimeError, match="start"):
        await consumer.fetch(1)
    await producer.close()
    await consumer.close()
    with pytest.raises(BackendUnavailable):
        await consumer.fetch(1)  # closed, not merely unstarted


# The embedded queue end to end: what the dispatcher publishes, the worker reads whole.


async def test_a_local_delivery_comes_back_with_its_trace_context(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    producer = LocalReadyQueue(str(path))
    consumer = open_consumer(f"local://{path}", ["q"], 30_000)
    await producer.start()
    await consumer.start()
    try:
        trace = {**TRACE, "tracestate": "k=v"}
        await producer.publish([Delivery(make_task("a").entry(), T0, trace)])
        (msg,) = await fetch_until(consumer, 1)
        assert dict(msg.delivery.trace_context) == trace
        assert msg.headers == {}  # no headers here: the delivery carries the context
        assert trace_carrier(msg.headers, msg.delivery.trace_context) == trace
    finally:
        await consumer.close()
        await producer.close()


# Import rules.


def tikk_imports(path: Path) -> set[str]:
    """The absolute module names ``path`` imports (the project uses no relative imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


# What the contract (and the URL parser it reads credentials with) may import besides the
# standard library: leaves that pull in no server module and no driver.
CONTRACT_LEAVES = {"tikk.errors", "tikk.urls"}


@pytest.mark.parametrize("module", [queue_contract, urls, clock], ids=lambda m: m.__name__)
def test_the_contract_imports_only_the_standard_library_and_tikk_leaves(module: object) -> None:
    imported = tikk_imports(Path(str(getattr(module, "__file__", ""))))
    outside = {
        name
        for name in imported
        if name.split(".")[0] not in sys.stdlib_module_names and name not in CONTRACT_LEAVES
    }
    assert outside == set()


def test_worker_sdk_imports_of_tikk_are_only_the_stubs_the_errors_and_the_queue_contract() -> None:
    # The client transport (grpc only) too, so a worker reaches a server with TLS and tokens
    # exactly as every other client of ours does; tikk.drivers.kafka: the Kafka login and
    # topic creation both queue sides share (aiokafka, which a Kafka worker imports anyway,
    # the errors and the contract); tikk.urls: stdlib only (see above); tikk.clock: stdlib
    # only, the one wall clock (and the manual clock of tests) the worker and its local
    # queue read; tikk.text_rules (stdlib and the errors): the name rule the server applies
    # to a worker id, checked when the worker is built; tikk.drivers.sqlite (stdlib and the
    # errors): the private creation of the local queue's file; tikk.queue_doorbell (stdlib
    # only): the local queue's wake-up, which both sides share; tikk.metric_catalog (stdlib
    # only) and tikk.metric_sinks (OpenTelemetry or prometheus_client, each imported when
    # used): the run metrics, described and recorded as every other process's;
    # tikk.payload_codec (stdlib only): typed payloads, encoded as the client encodes them;
    # tikk.client (grpc and the stubs): what the pytest fixture of worker_sdk.pytest_plugin
    # hands a test to create tasks with, imported only when a test asks for it.
    allowed = {
        "tikk.errors", "tikk.queue_contract", "tikk.client.transport", "tikk.urls",
        "tikk.drivers.kafka", "tikk.clock", "tikk.text_rules", "tikk.drivers.sqlite",
        "tikk.queue_doorbell", "tikk.metric_catalog", "tikk.metric_sinks",
        "tikk.payload_codec", "tikk.client",
    }  # fmt: skip
    offending = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "worker_sdk").rglob("*.py"))
        for name in tikk_imports(path)
        if name.split(".")[0] in {"tikk", "dispatcher", "server", "history"}
        and name not in allowed
        and not (name == "tikk.v1" or name.startswith("tikk.v1."))
    }
    assert offending == set()
