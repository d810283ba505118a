"""The Kafka ready queue, producer side (``worker_sdk.kafka_queue`` is the consumer side).

URL: ``kafka://host:port[,host:port...][?prefix=tikk.&partitions=8&replication=1]``.

Each task queue is the topic ``<prefix><queue>``; its dead letters go to ``<prefix><queue>.dlq``.
A message's key is the task key (``namespace/task_id``), so the deliveries of one task stay in
order on one partition; its value is a serialised ``tikk.v1.Delivery`` (``tikk.delivery_codec``),
or a ``DeadLetterRecord`` on a dead-letter topic.

Topics are created on first use with ``partitions`` partitions and ``replication`` replicas:
broker-side auto-creation stays off, because a mistyped queue name would otherwise become a
topic nobody consumes. ``replication`` defaults to 1 (the single-node stack); set it to 3 on a
real cluster. The worker side creates missing topics the same way, so either may start first.

Durability: ``acks=all`` with the idempotent producer, so a publish that returned is on every
in-sync replica and an internally retried batch is not written twice. A batch is sent whole
before any acknowledgement is awaited: it costs about one round trip, not one per message.

Needs the ``kafka`` extra (aiokafka); this module is imported only when a ``kafka://`` URL is
configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.ready_queue import dead_letter_queue
from tikk import delivery_codec
from tikk.errors import BackendUnavailable, InvalidArgument
from tikk.model import Delivery

try:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, NoError, TopicAlreadyExistsError, for_code
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kafka:// queues need aiokafka: pip install 'tikk[kafka]'") from exc

_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_OPTIONS = ("prefix", "partitions", "replication")
# No lingering: publish awaits its acknowledgements, so waiting to batch would only delay every
# dispatch. A batch is queued whole before its first send, and sends queued while a request
# is in flight go out together, which is the batching that matters.
_LINGER_MS = 0


@dataclass(frozen=True)
class KafkaQueueConfig:
    """Where the queues live and how their topics are made (parsed from the queue URL).

    ``worker_sdk.kafka_queue.KafkaQueueConfig`` parses the same URL the same way; the layering
    (``worker_sdk`` imports no ``dispatcher``) is why there are two.
    """

    bootstrap_servers: tuple[str, ...]
    prefix: str = "tikk."
    partitions: int = 8
    replication: int = 1

    @classmethod
    def from_url(cls, url: str) -> KafkaQueueConfig:
        """Parse ``kafka://host:port[,host:port][?prefix=&partitions=&replication=]``; raises
        ``InvalidArgument`` (field ``queue_url``) naming what is wrong."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "kafka" or not parts.netloc or parts.path not in ("", "/"):
            raise _bad(url, "expected kafka://host:port[,host:port][?prefix=...&partitions=...]")
        options = _options(url, parts.query)
        prefix = options.get("prefix", cls.prefix)
        if not _TOPIC_CHARS.fullmatch(prefix):
            raise _bad(url, "prefix may contain only A-Z a-z 0-9 . _ -")
        return cls(
            bootstrap_servers=_brokers(url, parts.netloc),
            prefix=prefix,
            partitions=_positive(url, options, "partitions", cls.partitions),
            replication=_positive(url, options, "replication", cls.replication),
        )

    def topic(self, queue: str) -> str:
        return self.prefix + queue


def _bad(url: str, reason: str) -> InvalidArgument:
    return InvalidArgument("queue_url", f"{reason} (got {url!r})")


def _options(url: str, query: str) -> dict[str, str]:
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    options = dict(pairs)
    unknown = sorted(options.keys() - set(_OPTIONS))
    if unknown:
        raise _bad(url, f"unknown option {unknown[0]!r} (known: {', '.join(_OPTIONS)})")
    if len(options) != len(pairs):
        raise _bad(url, "an option is given twice")
    return options


def _brokers(url: str, netloc: str) -> tuple[str, ...]:
    brokers = tuple(netloc.split(","))
    for broker in brokers:
        host, sep, port = broker.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise _bad(url, f"broker {broker!r} is not host:port")
    return brokers


def _positive(url: str, options: dict[str, str], name: str, default: int) -> int:
    text = options.get(name, str(default))
    if not text.isdigit() or int(text) < 1:
        raise _bad(url, f"{name} must be a positive integer")
    return int(text)


@dataclass(frozen=True)
class _Record:
    topic: str
    key: str
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


@contextlib.contextmanager
def _unavailable(action: str) -> Iterator[None]:
    """Translate the driver's failures into ``BackendUnavailable``: the one place for it."""
    try:
        yield
    except (KafkaError, OSError) as exc:
        raise BackendUnavailable(f"kafka: {action} failed: {exc!r}") from exc


class KafkaReadyQueue:
    """``ReadyQueue`` on Kafka. Constructing it does no I/O; the first publish connects."""

    def __init__(self, config: KafkaQueueConfig) -> None:
        self._config = config
        self._producer: Any = None
        self._admin: Any = None
        self._known_topics: set[str] = set()
        self._start_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def from_url(cls, url: str) -> KafkaReadyQueue:
        return cls(KafkaQueueConfig.from_url(url))

    def __repr__(self) -> str:
        return f"KafkaReadyQueue({','.join(self._config.bootstrap_servers)!r})"

    async def publish(self, deliveries: Sequence[Delivery]) -> None:
        records = [
            _Record(
                self._config.topic(d.entry.queue), d.entry.key, delivery_codec.encode(d),
                # The standard W3C headers, so any traced Kafka consumer continues the trace.
                tuple((k, v.encode()) for k, v in d.trace_context.items()),
            )
            for d in deliveries
        ]  # fmt: skip
        await self._send(records)

    async def publish_dead_letter(
        self, delivery: Delivery, error_type: str, error_message: str
    ) -> None:
        # Same clock as the embedded queue: the interface passes no "now".
        body = delivery_codec.encode_dead_letter(
            delivery, error_type, error_message, delivery.fired_ms
        )
        topic = self._config.topic(dead_letter_queue(delivery.entry.queue))
        await self._send([_Record(topic, delivery.entry.key, body)])

    async def close(self) -> None:
        async with self._start_lock:
            self._closed = True
            producer, admin = self._producer, self._admin
            self._producer = self._admin = None
        with _unavailable("close"):
            try:
                if producer is not None:
                    await producer.stop()  # flushes what is still buffered
            finally:
                if admin is not None:
                    await admin.close()

    async def _send(self, records: list[_Record]) -> None:
        if not records:
            return
        with _unavailable("publish"):
            producer, admin = await self._started()
            await self._ensure_topics(admin, {r.topic for r in records})
            await _send_all(producer, records)

    async def _started(self) -> tuple[Any, Any]:
        """The producer and admin client, connected on first use."""
        async with self._start_lock:
            if self._closed:
                raise BackendUnavailable("kafka: the ready queue is closed")
            if self._producer is None:
                servers = list(self._config.bootstrap_servers)
                admin = await _start(AIOKafkaAdminClient(bootstrap_servers=servers))
                try:
                    producer = AIOKafkaProducer(
                        bootstrap_servers=servers,
                        acks="all",
                        enable_idempotence=True,
                        linger_ms=_LINGER_MS,
                    )
                    self._producer = await _start(producer)
                except BaseException:
                    await admin.close()
                    raise
                self._admin = admin
            return self._producer, self._admin

    async def _ensure_topics(self, admin: Any, topics: set[str]) -> None:
        missing = sorted(topics - self._known_topics)
        if not missing:
            return
        c = self._config
        new = [NewTopic(name, c.partitions, c.replication) for name in missing]
        response = await admin.create_topics(new)
        for topic, code, *_ in response.topic_errors:
            error = for_code(code)
            # Another dispatcher (or a worker) may have created it first: that is success.
            if error not in (NoError, TopicAlreadyExistsError):
                raise BackendUnavailable(f"kafka: creating topic {topic!r} failed: {error}")
            self._known_topics.add(topic)


async def _start(client: Any) -> Any:
    """``client`` started; stopped again if starting fails, so no connection leaks."""
    try:
        await client.start()
    except BaseException:
        await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())
        raise
    return client


async def _send_all(producer: Any, records: list[_Record]) -> None:
    """Send every record, then wait for every acknowledgement; raises the first failure."""
    futures = []
    try:
        for r in records:
            sent = await producer.send(
                r.topic, value=r.value, key=r.key.encode(), headers=list(r.headers) or None
            )
            futures.append(sent)
    finally:
        # Even when a send failed midway, collect the others so none is left unobserved.
        outcomes = await asyncio.gather(*futures, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
