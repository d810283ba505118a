"""Consumer of the Kafka ready queue (``dispatcher.ready_queue.kafka`` is the producer side).

**Topics and groups.** The URL is the producer's, read by the same ``KafkaQueueUrl``
(``tikk.queue_contract``). Queue ``q`` is topic ``<prefix>q``, and its workers form the group
``<prefix>workers.q``: one group per queue, not per worker's set of queues, since a worker of
``[email, sms]`` and one of ``[email]`` must split ``email``. So a consumer runs one Kafka
consumer per queue. It creates missing topics as the producer does.

**Commits.** Workers finish messages out of order; Kafka keeps one offset per partition. A
``PartitionLedger`` (``worker_sdk.queues.kafka_ledger``) per assigned partition notes what was
handed out and what is done, and the offset committed is the oldest message not yet done (one
past the newest, when all are): it never passes an unfinished message, never moves back.
``commit_many`` (a Worker's batch) is one request per queue, over every partition whose
offset moved; commits queued behind one another coalesce into one request.

**Rebalances.** On revocation what is done is committed and the partitions' ledgers dropped;
their unfinished messages, and finished ones behind those, go to the new owner (at-least-once).
A worker with an instance id is a static member of each group (``GroupTiming``): restarted
within the session, it gets its partitions back and the other members are not disturbed.
Each assignment has a new epoch, carried by the messages handed out in it, so a late ``commit``
from an earlier assignment does nothing: the partition is someone else's now, or was re-read.

**Poison messages.** A message that kills the worker before it reports stays at the committed
offset and comes back after every restart; commit metadata counts how often. Before the head
of a partition (its oldest message not done, where a restart resumes) is handed out, its offset
is committed with metadata ``started:<offset>:<n>``, n its delivery count, so a crash right
after counts. On assignment the committed offset and metadata are read back (by the admin
client; ``AIOKafkaConsumer.committed`` drops metadata) and the message they name is handed out
with ``delivery_count`` n + 1. Past ``max_deliveries`` the Worker dead-letters it, and its
commit moves the partition on. The count is bounded but coarse: only heads are counted, and a
crash or rebalance counts against every head in flight then (as an expired lease does in the
embedded queue), so an unlucky head can be dead-lettered; the task store can re-drive it.

**Leases.** None per message: a partition stays with its owner while the consumer's session
lives (heartbeats run in the background), so ``extend`` does nothing and the visibility timeout
does not apply. ``max_poll_interval_ms`` is long because a Worker whose slots are all busy does
not fetch, and a consumer that does not fetch for that long is put out of its group.

Each queue's group member and its partitions' ledgers are a ``QueueLane``
(``worker_sdk.queues.kafka_lane``); this module opens the lanes and shares fetches among them.

Needs the ``kafka`` extra (aiokafka).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from tikk.drivers.kafka import REQUEST_TIMEOUT_S, check_login, create_topics, sockets_released
from tikk.errors import BackendUnavailable
from tikk.queue_contract import KafkaQueueUrl
from worker_sdk.queues.consumer import GroupTiming, Message
from worker_sdk.queues.kafka_lane import KafkaReceipt, Partition, QueueLane, consumer_unavailable

try:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kafka:// queues need aiokafka: pip install 'tikk[kafka]'") from exc

_WAIT_MS = 20  # how long an idle fetch waits for a message


class KafkaQueueConsumer:
    """``QueueConsumer`` on Kafka. Constructing it does no I/O: ``start`` connects, creates
    missing topics and joins the groups with ``timing`` (``GroupTiming``). After ``close``, a
    ``commit`` finds no lane and does nothing: the partitions are someone else's by then."""

    def __init__(
        self, config: KafkaQueueUrl, queues: Sequence[str], timing: GroupTiming | None = None
    ) -> None:
        if not queues:
            raise ValueError("a consumer needs at least one queue")
        self._config = config
        self._queues = list(dict.fromkeys(queues))
        self._timing = timing or GroupTiming()
        self._lanes: list[QueueLane] = []
        self._admin: Any = None
        self._turn = 0
        self._start_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def from_url(
        cls, url: str, queues: Sequence[str], timing: GroupTiming | None = None
    ) -> KafkaQueueConsumer:
        return cls(KafkaQueueUrl.from_url(url), queues, timing)

    def __repr__(self) -> str:
        return f"KafkaQueueConsumer({self._config.shown!r}, {self._queues})"

    @property
    def config(self) -> KafkaQueueUrl:
        return self._config

    def assignment(self) -> frozenset[Partition]:
        """The (topic, partition) pairs this consumer owns now, over all its queues."""
        return frozenset(tp for lane in self._lanes for tp in lane.ledgers)

    async def start(self) -> None:
        """Connect, create missing topics and join the groups; idempotent, and may be awaited
        again after it failed. Raises ``BackendUnavailable``, or ``BackendRefused`` when the
        broker refuses the URL's login or certificate (no use trying again)."""
        async with self._start_lock:
            if self._closed:
                raise BackendUnavailable("kafka: the consumer is closed")
            if not self._lanes:
                await check_login(self._config)
                with consumer_unavailable("start"):
                    await self._open()

    async def fetch(self, max_messages: int) -> list[Message]:
        if max_messages < 1:
            return []
        if not self._lanes:
            if self._closed:
                raise BackendUnavailable("kafka: the consumer is closed")
            raise RuntimeError(f"{self!r} is not started (or its start failed): await start()")
        self._turn = (self._turn + 1) % len(self._lanes)
        lanes = self._lanes[self._turn :] + self._lanes[: self._turn]  # no queue goes first always
        return await _sweep(lanes, max_messages) or await _wait(lanes, max_messages)

    async def commit(self, message: Message) -> None:
        await self.commit_many([message])

    def on_arrival(self, wake: Callable[[], None]) -> bool:
        return False  # an idle fetch waits on the brokers for messages (_WAIT_MS)

    async def commit_many(self, messages: Sequence[Message]) -> None:
        """One commit request per queue among ``messages`` (a queue is a group of its own)."""
        # A receipt of another kind is not ours: nothing of ours to commit.
        receipts = [m.receipt for m in messages if isinstance(m.receipt, KafkaReceipt)]
        for lane in self._lanes:
            mine = [r for r in receipts if r.queue == lane.queue]
            if mine:
                await lane.commit(mine)

    async def extend(self, messages: Sequence[Message]) -> None:
        """Nothing to renew: no per-message lease (see the module docstring)."""

    async def close(self) -> None:
        async with self._start_lock:
            if self._closed:
                return
            self._closed = True
            lanes, admin, self._lanes = self._lanes, self._admin, []
        closers = [lane.close for lane in lanes] + ([admin.close] if admin is not None else [])
        errors: list[Exception] = []
        for close in closers:  # every one, even after a failure
            try:
                await close()
            except (KafkaError, OSError) as exc:
                errors.append(exc)
        await sockets_released()  # the loop may end once this returns
        if errors:
            raise BackendUnavailable(f"kafka: close failed: {errors[0]!r}") from errors[0]

    async def _open(self) -> None:
        self._admin = AIOKafkaAdminClient(**self._config.client_options())
        try:
            await self._admin.start()
            await _ensure_topics(self._admin, self._config, self._queues)
            for queue in self._queues:
                self._lanes.append(await self._join(queue))
        except BaseException:
            with contextlib.suppress(KafkaError, OSError):  # the first failure is the news
                for lane in self._lanes:
                    await lane.close()
                await self._admin.close()
            self._lanes, self._admin = [], None
            raise

    async def _join(self, queue: str) -> QueueLane:
        t = self._timing
        group = self._config.group(queue)
        consumer = AIOKafkaConsumer(
            **self._config.client_options(),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=t.session_timeout_ms,
            heartbeat_interval_ms=t.heartbeat_interval_ms,
            max_poll_interval_ms=t.max_poll_interval_ms,
            # Static membership (``GroupTiming``): one member per queue, so the id is the
            # worker's in each queue's group.
            group_instance_id=t.instance_id,
            # A group leader re-assigns when it sees partitions appear, so a look every 30 s
            # (not the default 5 min) bounds how long new partitions or a late topic wait.
            metadata_max_age_ms=30_000,
        )
        lane = QueueLane(queue, group, consumer, self._admin)
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        consumer.subscribe([self._config.topic(queue)], listener=lane.listener())
        return lane


async def _ensure_topics(admin: Any, config: KafkaQueueUrl, queues: list[str]) -> None:
    """Create the topics of ``queues`` that are missing (as the producer does, so either may
    start first) and wait until they are visible."""
    topics = [config.topic(q) for q in queues]
    refused = await create_topics(admin, config, topics)
    if refused:
        first = refused[0]
        raise BackendUnavailable(f"kafka: creating topic {first.topic!r} failed: {first.error}")
    await _until_visible(admin, topics)


async def _until_visible(admin: Any, topics: list[str]) -> None:
    """Wait until the brokers list every partition of ``topics`` with a leader. A new topic
    takes a moment to appear, and a group leader assigning before then assigns nothing."""
    deadline = asyncio.get_running_loop().time() + REQUEST_TIMEOUT_S
    while not all(map(_has_leaders, await admin.describe_topics(topics))):
        if asyncio.get_running_loop().time() > deadline:
            raise BackendUnavailable(f"kafka: topics {topics} have no leaders yet")
        await asyncio.sleep(0.05)


def _has_leaders(topic: dict[str, Any]) -> bool:
    partitions = topic["partitions"]
    return (
        topic["error_code"] == 0
        and bool(partitions)
        and all(p["error_code"] == 0 and p["leader"] >= 0 for p in partitions)
    )


async def _sweep(lanes: list[QueueLane], max_messages: int) -> list[Message]:
    """What the lanes have buffered already, lane by lane, up to ``max_messages``."""
    messages: list[Message] = []
    for lane in lanes:
        if len(messages) >= max_messages:
            break
        try:
            messages += await lane.take(max_messages - len(messages), 0)
        except BackendUnavailable:
            if not messages:
                raise
            break  # hand out what we have; the next fetch reports the failure
    return messages


async def _wait(lanes: list[QueueLane], max_messages: int) -> list[Message]:
    """Nothing was buffered: wait briefly on all lanes at once, each for its share."""
    n = len(lanes)
    shares = [max_messages // n + (i < max_messages % n) for i in range(n)]
    outcomes = await asyncio.gather(
        *(lane.take(share, _WAIT_MS) for lane, share in zip(lanes, shares, strict=True) if share),
        return_exceptions=True,
    )
    messages = [m for outcome in outcomes if isinstance(outcome, list) for m in outcome]
    errors = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if errors and not messages:
        raise errors[0]
    return messages
