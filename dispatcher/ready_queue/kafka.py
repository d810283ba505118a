"""The Kafka ready queue, producer side (``worker_sdk.queues.kafka`` is the consumer side).

URL, topic and group names and record headers: ``tikk.queue_contract.KafkaQueueUrl``. Each task
queue is the topic ``<prefix><queue>``; its dead letters go to ``<prefix><queue>.dlq``. A
message's key is the task key (``namespace/task_id``), so the deliveries of one task stay in
order on one partition; its value is a serialised ``tikk.v1.Delivery`` (``tikk.delivery_codec``),
or a ``DeadLetterRecord`` on a dead-letter topic.

Topics are created with ``partitions`` partitions, ``replication`` replicas and the URL's
``min_insync`` as their ``min.insync.replicas`` by ``prepare``
(both topics of a queue, before the server accepts a task of it), and on first use as well
for tasks accepted before that existed. Broker-side auto-creation stays off, because a
mistyped queue name would otherwise become a topic nobody consumes. ``replication`` defaults
to 1 (the single-node stack); set it to 3 on a real cluster. The worker side creates missing
topics with the same function (``tikk.drivers.kafka.create_topics``), so either may start
first. A name the broker refuses (Kafka treats ``.`` and ``_`` as one character, so ``a.b``
and ``a_b`` collide) is an error naming the topic.

The backlog of a queue is read per partition: the end offset minus what the queue's workers'
group (``<prefix>workers.<queue>``) committed, or minus the log start where it committed
nothing; the oldest waiting message is fetched to read its timestamp.

Durability: ``acks=all`` with the idempotent producer, so a publish that returned is on every
in-sync replica (at least ``min_insync`` of them: with 3 replicas, 2) and an internally
retried batch is not written twice. A batch is sent whole
before any acknowledgement is awaited: it costs about one round trip, not one per message.

``start`` logs in (``tikk.drivers.kafka.check_login``: credentials or a certificate the
broker refuses fail it with ``BackendRefused``), then connects the producer and the admin
client; the consumer that reads the backlog connects on the first backlog read (only the server
reads backlogs). A client that is not connected when needed (Kafka was down at ``start``) is
connected then. Every client connects with the URL's login and TLS (``client_options``).

Needs the ``kafka`` extra (aiokafka); this module is imported only when a ``kafka://`` URL is
configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tikk import delivery_codec
from tikk.drivers.kafka import (
    REQUEST_TIMEOUT_S,
    TopicRefusal,
    check_login,
    create_topics,
    sockets_released,
)
from tikk.errors import BackendUnavailable
from tikk.model import Delivery
from tikk.queue_contract import KafkaQueueUrl, trace_headers
from tikk.ready_queue import QueueBacklog, with_idle

try:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kafka:// queues need aiokafka: pip install 'tikk[kafka]'") from exc

log = logging.getLogger("tikk.dispatcher")

# One message per partition is all the backlog reads; a bigger one still comes whole.
_PROBE_FETCH_BYTES = 64 * 1024
# How long the backlog waits for the oldest waiting message of a partition.
_PROBE_WAIT_S = 2.0
# No lingering: publish awaits its acknowledgements, so waiting to batch would only delay every
# dispatch. A batch is queued whole before its first send, and sends queued while a request
# is in flight go out together, which is the batching that matters.
_LINGER_MS = 0


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
    except (KafkaError, OSError, TimeoutError) as exc:
        raise BackendUnavailable(f"kafka: {action} failed: {exc!r}") from exc


class KafkaReadyQueue:
    """``ReadyQueue`` on Kafka. Constructing it does no I/O; ``start`` connects."""

    def __init__(self, config: KafkaQueueUrl) -> None:
        self._config = config
        self._producer: Any = None
        self._admin: Any = None
        # A consumer in no group, for reading offsets and the oldest messages' timestamps.
        self._probe: Any = None
        self._probe_lock = asyncio.Lock()
        self._known_topics: set[str] = set()
        # Queues this process prepared or published to, reported even when nothing waits.
        self._queues: set[str] = set()
        self._start_lock = asyncio.Lock()
        self._started = False
        self._closed = False

    @classmethod
    def from_url(cls, url: str) -> KafkaReadyQueue:
        return cls(KafkaQueueUrl.from_url(url))

    def __repr__(self) -> str:
        return f"KafkaReadyQueue({self._config.shown!r})"

    @property
    def config(self) -> KafkaQueueUrl:
        return self._config

    async def start(self) -> None:
        """Connect now if Kafka answers. A Kafka that does not is no reason to refuse to
        start (a server restarted during a Kafka outage must still answer, UNAVAILABLE for
        what needs the queue): each call connects again until it does. A broker that refuses
        the login is: ``BackendRefused``."""
        self._started = True
        try:
            await check_login(self._config)
            with _unavailable("start"):
                await self._admin_client()
                await self._producer_client()
        except BackendUnavailable as exc:
            log.warning("Kafka is not reachable yet (%s); connecting again on use", exc)

    async def prepare(self, queues: Collection[str]) -> None:
        c = self._config
        topics = {t for q in queues for t in (c.topic(q), c.dead_letter_topic(q))}
        if not topics <= self._known_topics:
            with _unavailable("preparing queues"):
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    refused = await self._ensure_topics(await self._admin_client(), topics)
            if refused:
                raise refused[0].as_error()
        self._queues.update(queues)

    async def publish(self, deliveries: Sequence[Delivery]) -> None:
        self._queues.update(d.entry.queue for d in deliveries)
        records = [
            _Record(
                self._config.topic(d.entry.queue), d.entry.key, delivery_codec.encode_delivery(d),
                trace_headers(d.trace_context),
            )
            for d in deliveries
        ]  # fmt: skip
        await self._send(records)

    async def publish_dead_letter(
        self, delivery: Delivery, error_type: str, error_message: str
    ) -> None:
        self._queues.add(delivery.entry.queue)
        # Same clock as the embedded queue: the interface passes no "now".
        body = delivery_codec.encode_dead_letter(
            delivery, error_type, error_message, delivery.fired_ms
        )
        topic = self._config.dead_letter_topic(delivery.entry.queue)
        await self._send([_Record(topic, delivery.entry.key, body)])

    async def backlog(self, queues: Collection[str] = ()) -> list[QueueBacklog]:
        with _unavailable("reading the backlog"):
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                admin = await self._admin_client()
                names = await self._listed_queues(admin) | self._queues | set(queues)
                async with self._probe_lock:  # one reader at a time moves the probe
                    found = await self._measure(admin, await self._probe_client(), names)
        return with_idle({b.queue: b for b in found}, names)

    async def ping(self) -> None:
        # A metadata request naming no topic: the brokers answer with themselves only.
        with _unavailable("ping"):
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                await (await self._admin_client()).describe_topics([])

    async def close(self) -> None:
        async with self._start_lock:
            self._closed = True
            clients = [c for c in (self._producer, self._probe, self._admin) if c is not None]
            self._producer = self._probe = self._admin = None
        failure: Exception | None = None
        for client in clients:  # every one, even after a failure; the producer flushes first
            try:
                await _stop(client)
            except (KafkaError, OSError) as exc:
                failure = failure or exc
        await sockets_released()  # the loop may end once this returns
        if failure is not None:
            raise BackendUnavailable(f"kafka: close failed: {failure!r}") from failure

    async def _send(self, records: list[_Record]) -> None:
        if not records:
            return
        with _unavailable("publish"):
            producer = await self._producer_client()
            refused = await self._ensure_topics(
                await self._admin_client(), {r.topic for r in records}
            )
            if refused:
                raise BackendUnavailable(f"kafka: {refused[0]}")
            await _send_all(producer, records)

    async def _admin_client(self) -> Any:
        """The admin client, connected on first use."""
        async with self._start_lock:
            self._check_open()
            if self._admin is None:
                options = self._config.client_options()
                self._admin = await _start(AIOKafkaAdminClient(**options))
            return self._admin

    async def _producer_client(self) -> Any:
        """The producer, connected on first use."""
        async with self._start_lock:
            self._check_open()
            if self._producer is None:
                producer = AIOKafkaProducer(
                    **self._config.client_options(),
                    acks="all",
                    enable_idempotence=True,
                    linger_ms=_LINGER_MS,
                )
                self._producer = await _start(producer)
            return self._producer

    async def _probe_client(self) -> Any:
        """The group-less consumer that reads offsets and timestamps, connected on first use."""
        async with self._start_lock:
            self._check_open()
            if self._probe is None:
                probe = AIOKafkaConsumer(
                    **self._config.client_options(),
                    enable_auto_commit=False,
                    auto_offset_reset="earliest",
                    max_partition_fetch_bytes=_PROBE_FETCH_BYTES,
                )
                self._probe = await _start(probe)
            return self._probe

    def _check_open(self) -> None:
        if self._closed:
            raise BackendUnavailable("kafka: the ready queue is closed")
        if not self._started:
            raise RuntimeError(f"{self!r} is not started: await start() first")

    async def _ensure_topics(self, admin: Any, topics: set[str]) -> list[TopicRefusal]:
        """Create those of ``topics`` not known to exist; returns the ones the broker
        refused, by name."""
        missing = sorted(topics - self._known_topics)
        if not missing:
            return []
        refused = await create_topics(admin, self._config, missing)
        self._known_topics.update(set(missing) - {r.topic for r in refused})
        return refused

    async def _listed_queues(self, admin: Any) -> set[str]:
        """The queues whose topics exist under the prefix (dead-letter topics left out)."""
        queues = {self._config.queue_of(topic) for topic in await admin.list_topics()}
        return {q for q in queues if q is not None}

    async def _measure(self, admin: Any, probe: Any, queues: set[str]) -> list[QueueBacklog]:
        """The backlog of each of ``queues`` whose topic exists."""
        partitions = await _partitions(admin, {self._config.topic(q): q for q in queues})
        every = [tp for tps in partitions.values() for tp in tps]
        if not every:
            return []
        starts = await probe.beginning_offsets(every)
        ends = await probe.end_offsets(every)
        groups = await asyncio.gather(
            *(_group_state(admin, self._config.group(q), tps) for q, tps in partitions.items())
        )
        heads = {
            tp: max(committed.get(tp, starts[tp]), starts[tp])
            for (committed, _), tps in zip(groups, partitions.values(), strict=True)
            for tp in tps
        }
        times = await _oldest_timestamps(probe, {tp: h for tp, h in heads.items() if ends[tp] > h})
        return [
            QueueBacklog(
                queue,
                sum(max(0, ends[tp] - heads[tp]) for tp in tps),
                min((times[tp] for tp in tps if tp in times), default=None),
                members,
            )
            for (queue, tps), (_, members) in zip(partitions.items(), groups, strict=True)
        ]


async def _partitions(admin: Any, queues_by_topic: dict[str, str]) -> dict[str, list[Any]]:
    """queue -> its topic's partitions, for the topics of ``queues_by_topic`` that exist."""
    if not queues_by_topic:
        return {}
    described = await admin.describe_topics(sorted(queues_by_topic))
    return {
        queues_by_topic[t["topic"]]: [TopicPartition(t["topic"], p["partition"])
                                      for p in t["partitions"]]
        for t in described
        if t["error_code"] == 0 and t["topic"] in queues_by_topic
    }  # fmt: skip


async def _group_state(admin: Any, group: str, tps: list[Any]) -> tuple[dict[Any, int], int]:
    """The offsets ``group`` committed on ``tps`` (where it committed any) and how many
    members it has now."""
    coordinator = await _coordinator(admin, group)
    found = await admin.list_consumer_group_offsets(group, coordinator, partitions=tps)
    committed = {TopicPartition(*tp): om.offset for tp, om in found.items() if om.offset >= 0}
    (response,) = await admin.describe_consumer_groups([group], group_coordinator_id=coordinator)
    (described,) = response.to_object()["groups"]
    return committed, len(described["members"])


async def _coordinator(admin: Any, group: str) -> int:
    """The broker coordinating ``group``; asks again while the broker says to retry (as it
    does while it loads the group's offsets)."""
    while True:
        try:
            coordinator: int = await admin.find_coordinator(group)
            return coordinator
        except KafkaError as exc:
            if not exc.retriable:
                raise
        await asyncio.sleep(0.1)


async def _oldest_timestamps(probe: Any, heads: dict[Any, int]) -> dict[Any, int]:
    """partition -> timestamp of its first message at or after ``heads[partition]``. A
    partition whose message cannot be read within a short wait (deleted meanwhile) is left
    out."""
    if not heads:
        return {}
    probe.assign(list(heads))
    try:
        for tp, offset in heads.items():
            probe.seek(tp, offset)
        found: dict[Any, int] = {}
        deadline = asyncio.get_running_loop().time() + _PROBE_WAIT_S
        while len(found) < len(heads) and asyncio.get_running_loop().time() < deadline:
            batch = await probe.getmany(timeout_ms=100)
            found |= {tp: records[0].timestamp for tp, records in batch.items() if records}
            probe.pause(*found)
        return found
    finally:
        probe.unsubscribe()  # no fetching in the background between reads


async def _start(client: Any) -> Any:
    """``client`` started; stopped again if starting fails, so no connection leaks."""
    try:
        await client.start()
    except BaseException:
        await _stop(client)
        raise
    return client


async def _stop(client: Any) -> None:
    await (client.close() if isinstance(client, AIOKafkaAdminClient) else client.stop())


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
