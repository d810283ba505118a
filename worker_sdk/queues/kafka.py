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

Needs the ``kafka`` extra (aiokafka).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tikk.drivers.kafka import REQUEST_TIMEOUT_S, check_login, create_topics
from tikk.errors import BackendUnavailable
from tikk.queue_contract import KafkaQueueUrl
from worker_sdk.queues.consumer import GroupTiming, Message, decode_delivery
from worker_sdk.queues.kafka_ledger import PartitionLedger

try:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import (
        CommitFailedError,
        ConsumerStoppedError,
        IllegalStateError,
        KafkaError,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kafka:// queues need aiokafka: pip install 'tikk[kafka]'") from exc

log = logging.getLogger("tikk.worker.kafka")

Partition = tuple[str, int]  # (topic, partition), equal to aiokafka's TopicPartition
_WAIT_MS = 20  # how long an idle fetch waits for a message
_POLL_GRACE_MS = 20  # getmany waits out a rebalance; fetch gives it this much longer, no more


@contextlib.contextmanager
def _consumer_unavailable(action: str) -> Iterator[None]:
    """Translate the driver's failures into ``BackendUnavailable``, a stopped consumer's too:
    the one place for it on this side."""
    try:
        yield
    except (KafkaError, ConsumerStoppedError, OSError) as exc:
        raise BackendUnavailable(f"kafka: {action} failed: {exc!r}") from exc


@dataclass(frozen=True)
class _Receipt:
    """Identifies a handed-out message: where it is and in which assignment it was handed out."""

    queue: str
    topic: str
    partition: int
    offset: int
    epoch: int


class _QueueLane:
    """One queue of a consumer: its Kafka consumer (a member of the queue's group) and the
    ledgers of the partitions it owns."""

    def __init__(self, queue: str, group: str, consumer: Any, admin: Any) -> None:
        self.queue = queue
        self.ledgers: dict[Partition, PartitionLedger] = {}
        self._group = group
        self._consumer = consumer
        self._admin = admin
        self._epoch = 0
        self._commit_lock = asyncio.Lock()
        self._rereading: asyncio.Task[None] | None = None

    async def take(self, max_messages: int, wait_ms: int) -> list[Message]:
        """Up to ``max_messages`` messages, waiting about ``wait_ms`` at most."""
        try:
            async with asyncio.timeout((wait_ms + _POLL_GRACE_MS) / 1000):
                with _consumer_unavailable("fetch"):
                    batch = await self._consumer.getmany(
                        timeout_ms=wait_ms, max_records=max_messages
                    )
        except TimeoutError:
            return []  # a rebalance is under way; the next fetch will see its outcome
        messages = [m for tp, records in batch.items() for m in self._hand_out(tp, records)]
        try:
            await self._flush(batch.keys())  # record the starts of new heads first
        except BackendUnavailable as exc:
            log.warning("queue %s: recording starts failed (%s); not counted", self.queue, exc)
        return [m for m in messages if self._current(m.receipt)]

    def _hand_out(self, tp: Any, records: list[Any]) -> list[Message]:
        ledger = self.ledgers.get((tp.topic, tp.partition))
        if ledger is None:
            # Fetched outside an assignment we know: put them back rather than skip them.
            with contextlib.suppress(IllegalStateError):
                self._consumer.seek(tp, records[0].offset)
            return []
        floor = ledger.floor
        if floor is not None and records[0].offset < floor:
            return self._skip_rewound(tp, records, floor, ledger)
        return [self._message(tp, ledger, record) for record in records]

    def _skip_rewound(
        self, tp: Any, records: list[Any], floor: int, ledger: PartitionLedger
    ) -> list[Message]:
        """The consumer's position went below the group's commit: the client resets to the
        earliest offset when it believes nothing was committed (a broker that froze and came
        back can make it think so), which would run a whole partition again. Messages below
        the commit are done: skip them, and jump to the commit if that was all."""
        log.warning(
            "queue %s: partition %s:%d rewound to offset %d below its commit %d; skipping to it",
            self.queue, tp.topic, tp.partition, records[0].offset, floor,
        )  # fmt: skip
        fresh = [record for record in records if record.offset >= floor]
        if not fresh:
            with contextlib.suppress(IllegalStateError):
                self._consumer.seek(tp, floor)
        return [self._message(tp, ledger, record) for record in fresh]

    def _message(self, tp: Any, ledger: PartitionLedger, record: Any) -> Message:
        count = ledger.hand_out(record.offset)
        receipt = _Receipt(self.queue, tp.topic, tp.partition, record.offset, ledger.epoch)
        body = bytes(record.value or b"")  # a null value must not fail every fetch
        return Message(decode_delivery(body), count, receipt, body, _text_headers(record.headers))

    def _current(self, receipt: object) -> bool:
        if not isinstance(receipt, _Receipt):
            return False
        ledger = self.ledgers.get((receipt.topic, receipt.partition))
        return ledger is not None and ledger.epoch == receipt.epoch

    async def commit(self, receipts: Iterable[_Receipt]) -> None:
        """Note ``receipts`` done in their ledgers, then commit the partitions whose offset
        moved, all in one request. A receipt of an earlier assignment does nothing: the
        partition was re-read (or is someone else's) since."""
        newest: dict[Partition, int] = {}  # per partition, the newest offset finished here
        for r in receipts:
            tp = (r.topic, r.partition)
            if self._current(r) and self.ledgers[tp].finish(r.offset):
                newest[tp] = max(r.offset, newest.get(tp, r.offset))
        if newest:
            await self._flush(newest, past=newest)

    async def _flush(
        self, partitions: Iterable[Partition], past: Mapping[Partition, int] | None = None
    ) -> None:
        """Commit every ledger target of ``partitions`` that moved, in one request. A partition
        whose commit went past its offset in ``past`` while this call waited for the lock is
        left alone: that commit covered this caller's messages already."""
        past = past or {}
        async with self._commit_lock:
            targets = [
                (tp, ledger, target)
                for tp in partitions
                if (ledger := self.ledgers.get(tp))
                and not (tp in past and ledger.covers(past[tp]))
                and (target := ledger.target())
            ]
            if not targets:
                return
            offsets = {TopicPartition(*tp): target for tp, _, target in targets}
            with _consumer_unavailable("commit"):
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        await self._consumer.commit(offsets)
                except (CommitFailedError, IllegalStateError):
                    return  # the group moved on: the partitions' next owners re-read them
            for _, ledger, (offset, metadata) in targets:
                ledger.mark_committed(offset, metadata)

    async def revoked(self, partitions: Iterable[Any]) -> None:
        """Commit what is done on ``partitions``, then forget them."""
        tps = [(tp.topic, tp.partition) for tp in partitions]
        try:
            await self._flush(tps)
        except BackendUnavailable as exc:
            log.warning("queue %s: commit on revocation failed (%s)", self.queue, exc)
        for tp in tps:
            self.ledgers.pop(tp, None)

    async def assigned(self, partitions: Iterable[Any]) -> None:
        """Start a ledger for each of ``partitions`` from what the group committed. Until
        that is known the partitions stay paused (read again in the background): without it
        a client that rewound to the earliest offset could not be caught."""
        tps = list(partitions)
        self._consumer.pause(*tps)  # nothing may be handed out before its ledger exists
        committed: dict[Partition, tuple[int | None, str]] | None = None
        try:
            committed = await self._read_committed(tps)
        finally:  # even if cancelled: a partition without a ledger would stall
            self._epoch += 1
            for tp in tps:
                offset, metadata = (committed or {}).get((tp.topic, tp.partition), (None, ""))
                self.ledgers[(tp.topic, tp.partition)] = PartitionLedger(
                    self._epoch, offset, metadata
                )
            if committed is not None:
                self._resume(tps)
            else:
                self._rereading = asyncio.create_task(self._read_until_known(tps, self._epoch))

    def _resume(self, tps: list[Any]) -> None:
        with contextlib.suppress(IllegalStateError):
            self._consumer.resume(*tps)

    async def _read_until_known(self, tps: list[Any], epoch: int) -> None:
        """Read the commits of ``tps`` again until they are known, then resume them (unless
        they were reassigned meanwhile)."""
        delay = 0.5
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            committed = await self._read_committed(tps)
            if committed is None:
                continue
            for tp in tps:
                ledger = self.ledgers.get((tp.topic, tp.partition))
                if ledger is None or ledger.epoch != epoch:
                    return
                ledger.learn(*committed.get((tp.topic, tp.partition), (None, "")))
            log.info("queue %s: commits read; resuming %d partition(s)", self.queue, len(tps))
            self._resume(tps)
            return

    async def _read_committed(
        self, tps: list[Any]
    ) -> dict[Partition, tuple[int | None, str]] | None:
        """What the group committed for ``tps``; None if it could not be read."""
        if not tps:
            return {}  # an empty list would ask for every partition of the group
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                found = await self._admin.list_consumer_group_offsets(self._group, partitions=tps)
        except Exception as exc:  # a failure keeps the partitions paused and is retried
            log.warning("queue %s: reading commits failed (%r); retrying", self.queue, exc)
            return None
        return {
            (tp.topic, tp.partition): (None if om.offset < 0 else om.offset, om.metadata or "")
            for tp, om in found.items()
        }

    async def close(self) -> None:
        """Commit what is done (best effort: the rest is delivered again), leave the group."""
        try:
            await self._flush(list(self.ledgers))
        except BackendUnavailable as exc:
            log.warning("queue %s: commit on close failed (%s)", self.queue, exc)
        self.ledgers.clear()
        if self._rereading is not None:
            self._rereading.cancel()
        await self._consumer.stop()


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka has no types
    """Hands aiokafka's rebalance callbacks (which it awaits) to the lane."""

    def __init__(self, lane: _QueueLane) -> None:
        self._lane = lane

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._lane.revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._lane.assigned(assigned)


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
        self._lanes: list[_QueueLane] = []
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
                with _consumer_unavailable("start"):
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

    async def commit_many(self, messages: Sequence[Message]) -> None:
        """One commit request per queue among ``messages`` (a queue is a group of its own)."""
        # A receipt of another kind is not ours: nothing of ours to commit.
        receipts = [m.receipt for m in messages if isinstance(m.receipt, _Receipt)]
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

    async def _join(self, queue: str) -> _QueueLane:
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
            # A group leader re-assigns when it sees partitions appear, so a look every 30 s
            # (not the default 5 min) bounds how long new partitions or a late topic wait.
            metadata_max_age_ms=30_000,
        )
        lane = _QueueLane(queue, group, consumer, self._admin)
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        consumer.subscribe([self._config.topic(queue)], listener=_Rebalance(lane))
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


async def _sweep(lanes: list[_QueueLane], max_messages: int) -> list[Message]:
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


async def _wait(lanes: list[_QueueLane], max_messages: int) -> list[Message]:
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


def _text_headers(headers: Any) -> dict[str, str]:
    """Message headers that are valid text; others (binary, or a null value) are not ours and
    are left out rather than failing the fetch."""
    out: dict[str, str] = {}
    for key, value in headers or ():
        with contextlib.suppress(UnicodeDecodeError, TypeError):
            out[key] = bytes(value).decode()
    return out
