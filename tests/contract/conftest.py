"""Backends under contract: every suite here runs against each implementation listed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from history.run_history import RunHistory
from server.wiring import (
    BULK_ACTION_STORES,
    QUEUE_HOLD_STORES,
    QUOTA_STORES,
    RUN_HISTORIES,
    SCHEDULE_STORES,
    TASK_STORES,
    Drivers,
    Startable,
    build,
    started,
)
from tests.contract.cassandra_keyspace import TestKeyspace
from tests.services import KAFKA, kafka_options, require, with_login
from tikk.clock import Clock
from tikk.ready_queue import ReadyQueue
from tikk.store.bulk_actions import BulkActionStore
from tikk.store.queue_holds import QueueHoldStore
from tikk.store.quotas import QuotaStore
from tikk.store.schedules import ScheduleStore
from tikk.store.sqlite.tasks import SqliteTaskStore
from tikk.store.tasks import TaskStore
from worker_sdk.queues.consumer import QueueConsumer
from worker_sdk.queues.local import LocalQueueConsumer

if TYPE_CHECKING:
    from worker_sdk.queues.kafka import KafkaQueueConsumer

SHARDS = 16
B = TypeVar("B", bound=Startable)


@pytest.fixture(scope="session")
def keyspace() -> Iterator[TestKeyspace]:
    ks = TestKeyspace()
    yield ks
    ks.drop()


def backend_url(kind: str, tmp_path: Path, keyspace: TestKeyspace, file: str = "tikk.db") -> str:
    """The URL of a fresh database of ``kind``: an SQLite file, or the emptied test keyspace."""
    return f"sqlite://{tmp_path / file}" if kind == "sqlite" else keyspace.fresh()


async def open_backend(table: Mapping[str, Callable[[str, int, Drivers], B]], url: str,
                       drivers: Drivers, shards: int = SHARDS) -> B:  # fmt: skip
    """A backend as the processes open it: from wiring's table for ``url``'s scheme."""
    return await started(build(table, "url", url, shards, drivers))


@pytest.fixture(params=["sqlite", "cassandra"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: TestKeyspace
) -> AsyncIterator[TaskStore]:
    backend = await open_backend(TASK_STORES, backend_url(request.param, tmp_path, keyspace),
                                 Drivers())  # fmt: skip
    yield backend
    await backend.close()


Reopen = Callable[[int], Awaitable[TaskStore]]


@pytest.fixture
def reopen(store: TaskStore, tmp_path: Path, keyspace: TestKeyspace) -> Reopen:
    """Open the ``store`` fixture's data again, as a second process would, with a shard count."""

    async def again(shard_count: int) -> TaskStore:
        kind = "sqlite" if isinstance(store, SqliteTaskStore) else "cassandra"
        url = f"sqlite://{tmp_path / 'tikk.db'}" if kind == "sqlite" else keyspace.url()
        return await open_backend(TASK_STORES, url, Drivers(), shard_count)

    return again


@dataclass
class ScheduleBackend:
    """A schedule store and the task store of the same database."""

    schedules: ScheduleStore
    tasks: TaskStore


@pytest.fixture(params=["sqlite", "cassandra"])
async def schedule_backend(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: TestKeyspace
) -> AsyncIterator[ScheduleBackend]:
    url, drivers = backend_url(request.param, tmp_path, keyspace), Drivers()
    backend = ScheduleBackend(
        await open_backend(SCHEDULE_STORES, url, drivers),
        await open_backend(TASK_STORES, url, drivers),
    )
    yield backend
    await backend.schedules.close()
    await backend.tasks.close()


@dataclass
class QuotaBackend:
    """A quota store and the task store of the same database (whose usage it reports)."""

    quotas: QuotaStore
    tasks: TaskStore
    url: str


@pytest.fixture(params=["sqlite", "cassandra"])
async def quota_backend(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: TestKeyspace
) -> AsyncIterator[QuotaBackend]:
    url, drivers = backend_url(request.param, tmp_path, keyspace), Drivers()
    backend = QuotaBackend(
        await open_backend(QUOTA_STORES, url, drivers),
        await open_backend(TASK_STORES, url, drivers),
        url,
    )
    yield backend
    await backend.quotas.close()
    await backend.tasks.close()


@pytest.fixture(params=["sqlite", "cassandra"])
async def history(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: TestKeyspace
) -> AsyncIterator[RunHistory]:
    url = backend_url(request.param, tmp_path, keyspace, "history.db")
    backend = await open_backend(RUN_HISTORIES, url, Drivers())
    yield backend
    await backend.close()


class QueuePair:
    """A producer and a way to make consumers of the same queue backend. Constructing it does
    no I/O: ``start`` starts the producer, and ``consumer`` returns a started consumer.

    Consumers of one queue share its messages; on Kafka they do so once they have joined the
    queue's consumer group and split its partitions, which ``settle`` waits for (the embedded
    queue has nothing to wait for).
    """

    def __init__(
        self,
        url: str,
        producer: ReadyQueue,
        make_consumer: Callable[[list[str], int, Clock | None], QueueConsumer],
        settle: Callable[[Sequence[QueueConsumer]], Awaitable[None]] | None = None,
        cleanup: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.url = url
        self.producer = producer
        self._make_consumer = make_consumer
        self._settle = settle
        self._cleanup = cleanup
        self._consumers: list[QueueConsumer] = []

    @classmethod
    def local(cls, path: str) -> QueuePair:
        def make(queues: list[str], visibility_ms: int, clock: Clock | None) -> QueueConsumer:
            return LocalQueueConsumer(path, queues, visibility_ms, clock=clock)

        return cls(f"local://{path}", LocalReadyQueue(path), make)

    @classmethod
    def kafka(cls, address: str, partitions: int = 4) -> QueuePair:
        """Topics under a fresh prefix (no test sees another's messages), deleted at close;
        short group timing so that joins and rebalances take well under a second."""
        from dispatcher.ready_queue.kafka import KafkaReadyQueue
        from worker_sdk.queues.consumer import GroupTiming
        from worker_sdk.queues.kafka import KafkaQueueConsumer

        prefix = f"test.{uuid.uuid4().hex[:12]}."
        url = with_login(f"kafka://{address}?prefix={prefix}&partitions={partitions}")
        timing = GroupTiming(session_timeout_ms=6_000, heartbeat_interval_ms=100)

        def make(queues: list[str], visibility_ms: int, clock: Clock | None) -> QueueConsumer:
            # No per-message lease on Kafka: neither the visibility timeout nor a clock applies.
            return KafkaQueueConsumer.from_url(url, queues, timing)

        async def settle(consumers: Sequence[QueueConsumer]) -> None:
            kafka = [c for c in consumers if isinstance(c, KafkaQueueConsumer)]
            await _kafka_settle(kafka, partitions)

        async def cleanup() -> None:
            await _delete_topics(address, prefix)

        return cls(url, KafkaReadyQueue.from_url(url), make, settle, cleanup)

    async def start(self) -> None:
        await self.producer.start()

    async def consumer(
        self, queues: list[str], visibility_ms: int = 60_000, clock: Clock | None = None
    ) -> QueueConsumer:
        """A started consumer of ``queues`` (closed with the pair); its leases, where it has
        any, run on ``clock`` (the system clock by default)."""
        c = self._make_consumer(queues, visibility_ms, clock)
        self._consumers.append(c)
        await c.start()
        return c

    async def settle(self, *consumers: QueueConsumer) -> None:
        """Wait until ``consumers`` have joined their queues' groups and split the work."""
        if self._settle is not None:
            await self._settle(consumers)

    async def close(self) -> None:
        for c in self._consumers:
            await c.close()
        await self.producer.close()
        if self._cleanup is not None:
            await self._cleanup()


async def _kafka_settle(
    consumers: Sequence[KafkaQueueConsumer], partitions: int, timeout_s: float = 20
) -> None:
    """Wait until every consumer owns partitions, none owns another's, and all are owned."""
    for c in consumers:
        await c.start()
    deadline = time.monotonic() + timeout_s
    owned: list[frozenset[tuple[str, int]]] = []
    while time.monotonic() < deadline:
        owned = [c.assignment() for c in consumers]
        topics = {topic for assignment in owned for topic, _ in assignment}
        union = frozenset().union(*owned)
        if all(owned) and sum(map(len, owned)) == len(union) == partitions * len(topics):
            return
        await asyncio.sleep(0.02)  # the poll interval of this wait
    raise AssertionError(f"consumer group did not settle: {owned}")


async def _delete_topics(address: str, prefix: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_options(address))
    await admin.start()
    try:
        topics = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if topics:
            await admin.delete_topics(topics)
    finally:
        await admin.close()


@pytest.fixture(params=["local", "kafka"])
async def queue_pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[QueuePair]:
    if request.param == "kafka":
        pair = QueuePair.kafka(require("kafka", KAFKA))
    else:
        pair = QueuePair.local(str(tmp_path / "queue.db"))
    try:
        await pair.start()
        yield pair
    finally:
        await pair.close()


@pytest.fixture(params=["sqlite", "cassandra"])
async def bulk_store(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: TestKeyspace
) -> AsyncIterator[BulkActionStore]:
    url = backend_url(request.param, tmp_path, keyspace)
    backend = await open_backend(BULK_ACTION_STORES, url, Drivers())
    yield backend
    await backend.close()


@dataclass
class HoldBackend:
    """A queue-hold store and the task store of the same database (whose tasks it skips)."""

    holds: QueueHoldStore
    tasks: TaskStore


@pytest.fixture(params=["sqlite", "cassandra"])
async def hold_backend(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: TestKeyspace
) -> AsyncIterator[HoldBackend]:
    url, drivers = backend_url(request.param, tmp_path, keyspace), Drivers()
    backend = HoldBackend(
        await open_backend(QUEUE_HOLD_STORES, url, drivers),
        await open_backend(TASK_STORES, url, drivers),
    )
    yield backend
    await backend.holds.close()
    await backend.tasks.close()
