"""One queue of a Kafka consumer: its member of the queue's group and the ledgers of the
partitions it owns (``worker_sdk.queues.kafka`` runs one per queue and explains commits,
rebalances and poison counting)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tikk.drivers.kafka import REQUEST_TIMEOUT_S
from tikk.errors import BackendUnavailable
from worker_sdk.queues.consumer import Message, decode_delivery
from worker_sdk.queues.kafka_ledger import PartitionLedger

try:
    from aiokafka import ConsumerRebalanceListener, TopicPartition
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
_POLL_GRACE_MS = 20  # getmany waits out a rebalance; fetch gives it this much longer, no more
_REREAD_CAP_S = 1.0  # the longest wait between reads of a paused partition's commits


@contextlib.contextmanager
def consumer_unavailable(action: str) -> Iterator[None]:
    """Translate the driver's failures into ``BackendUnavailable``, a stopped consumer's too:
    the one place for it on this side."""
    try:
        yield
    except (KafkaError, ConsumerStoppedError, OSError) as exc:
        raise BackendUnavailable(f"kafka: {action} failed: {exc!r}") from exc


@dataclass(frozen=True)
class KafkaReceipt:
    """Identifies a handed-out message: where it is and in which assignment it was handed out."""

    queue: str
    topic: str
    partition: int
    offset: int
    epoch: int


class QueueLane:
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
        self._refused = False  # the group refused the last commit: said once, until one passes

    async def take(self, max_messages: int, wait_ms: int) -> list[Message]:
        """Up to ``max_messages`` messages, waiting about ``wait_ms`` at most."""
        try:
            async with asyncio.timeout((wait_ms + _POLL_GRACE_MS) / 1000):
                with consumer_unavailable("fetch"):
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
        receipt = KafkaReceipt(self.queue, tp.topic, tp.partition, record.offset, ledger.epoch)
        body = bytes(record.value or b"")  # a null value must not fail every fetch
        return Message(decode_delivery(body), count, receipt, body, _text_headers(record.headers))

    def _current(self, receipt: object) -> bool:
        if not isinstance(receipt, KafkaReceipt):
            return False
        ledger = self.ledgers.get((receipt.topic, receipt.partition))
        return ledger is not None and ledger.epoch == receipt.epoch

    async def commit(self, receipts: Iterable[KafkaReceipt]) -> None:
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
            with consumer_unavailable("commit"):
                try:
                    async with asyncio.timeout(REQUEST_TIMEOUT_S):
                        await self._consumer.commit(offsets)
                except (CommitFailedError, IllegalStateError) as exc:
                    self._commit_refused(exc)
                    return  # the group moved on: the partitions' next owners re-read them
            self._commit_passed()
            for _, ledger, (offset, metadata) in targets:
                ledger.mark_committed(offset, metadata)

    def _commit_refused(self, exc: Exception) -> None:
        """Say once that the group refuses this member's commits: while it does, everything
        finished here since the last commit runs again on the partitions' next owner."""
        if not self._refused:
            log.warning(
                "queue %s: the group refused a commit (%s); what this worker finished since "
                "its last commit will run again if its partitions move",
                self.queue,
                type(exc).__name__,  # aiokafka's text is a paragraph of advice
            )
        self._refused = True

    def _commit_passed(self) -> None:
        if self._refused:
            log.warning("queue %s: the group takes this worker's commits again", self.queue)
        self._refused = False

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
        they were reassigned meanwhile). The wait between reads stays short: a paused
        partition starts nothing, so it resumes within about a second of the broker answering
        again, and a read is one small request."""
        delay = 0.25
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, _REREAD_CAP_S)
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

    def listener(self) -> ConsumerRebalanceListener:
        """What to subscribe with: hands the group's rebalances to this lane."""
        return _Rebalance(self)

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

    def __init__(self, lane: QueueLane) -> None:
        self._lane = lane

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._lane.revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._lane.assigned(assigned)


def _text_headers(headers: Any) -> dict[str, str]:
    """Message headers that are valid text; others (binary, or a null value) are not ours and
    are left out rather than failing the fetch."""
    out: dict[str, str] = {}
    for key, value in headers or ():
        with contextlib.suppress(UnicodeDecodeError, TypeError):
            out[key] = bytes(value).decode()
    return out
