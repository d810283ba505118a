"""Backend selection by URL: the only place that knows which implementations exist.

``sqlite://PATH`` (task store, schedule store, run history) and ``local://PATH`` (ready queue)
form the embedded default; ``cassandra://``, ``kafka://`` and ``zk://`` the production stack.
Each interface has one ``{scheme: factory}`` table; factories construct without I/O and import
their driver lazily, so a driver is only needed when configured. Every backend then opens
with ``await start()`` and releases with ``close()``.

One process holds one ``Drivers``: backends of the same Cassandra keyspace share its session.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from dispatcher.ownership import Ownership, SingleOwner
from history.run_history import RunHistory
from tikk.errors import InvalidArgument
from tikk.ready_queue import ReadyQueue
from tikk.settings import Settings
from tikk.store.bulk_actions import BulkActionStore
from tikk.store.credentials import CredentialStore
from tikk.store.due_counts import DueCountStore
from tikk.store.queue_holds import QueueHoldStore
from tikk.store.quotas import QuotaStore
from tikk.store.schedules import ScheduleStore
from tikk.store.tasks import TaskStore
from tikk.urls import split_url

if TYPE_CHECKING:
    from tikk.drivers.cassandra import CassandraSession


class Startable(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


B = TypeVar("B", bound=Startable)
T = TypeVar("T")


@dataclass
class Drivers:
    """The driver sessions of one process, shared by the backends that use the same one."""

    _cassandra: dict[object, CassandraSession] = field(default_factory=dict)

    def cassandra(self, url: str, setting: str) -> CassandraSession:
        """The session of ``url``'s cluster and keyspace (one per process)."""
        from tikk.drivers.cassandra import CassandraConfig, CassandraSession

        config = CassandraConfig.from_url(url, setting)
        if config not in self._cassandra:
            self._cassandra[config] = CassandraSession(config)
        return self._cassandra[config]


# --- factories: (url, shard count, drivers) -> an unstarted backend -------------------------


def _sqlite_tasks(url: str, shards: int, drivers: Drivers) -> TaskStore:
    from tikk.store.sqlite.tasks import SqliteTaskStore

    return SqliteTaskStore(split_url("store_url", url)[1], shards)


def _cassandra_tasks(url: str, shards: int, drivers: Drivers) -> TaskStore:
    from tikk.store.cassandra.tasks import CassandraTaskStore

    return CassandraTaskStore(drivers.cassandra(url, "store_url"), shards)


def _sqlite_schedules(url: str, shards: int, drivers: Drivers) -> ScheduleStore:
    from tikk.store.sqlite.schedules import SqliteScheduleStore

    return SqliteScheduleStore(split_url("store_url", url)[1])


def _cassandra_schedules(url: str, shards: int, drivers: Drivers) -> ScheduleStore:
    from tikk.store.cassandra.schedules import CassandraScheduleStore

    return CassandraScheduleStore(drivers.cassandra(url, "store_url"))


def _sqlite_quotas(url: str, shards: int, drivers: Drivers) -> QuotaStore:
    from tikk.store.sqlite.quotas import SqliteQuotaStore

    return SqliteQuotaStore(split_url("store_url", url)[1])


def _cassandra_quotas(url: str, shards: int, drivers: Drivers) -> QuotaStore:
    from tikk.store.cassandra.quotas import CassandraQuotaStore

    return CassandraQuotaStore(drivers.cassandra(url, "store_url"))


def _sqlite_due_counts(url: str, shards: int, drivers: Drivers) -> DueCountStore:
    from tikk.store.sqlite.due_counts import SqliteDueCountStore

    return SqliteDueCountStore(split_url("store_url", url)[1])


def _cassandra_due_counts(url: str, shards: int, drivers: Drivers) -> DueCountStore:
    from tikk.store.cassandra.due_counts import CassandraDueCountStore

    return CassandraDueCountStore(drivers.cassandra(url, "store_url"))


def _sqlite_bulk_actions(url: str, shards: int, drivers: Drivers) -> BulkActionStore:
    from tikk.store.sqlite.bulk_actions import SqliteBulkActionStore

    return SqliteBulkActionStore(split_url("store_url", url)[1])


def _cassandra_bulk_actions(url: str, shards: int, drivers: Drivers) -> BulkActionStore:
    from tikk.store.cassandra.bulk_actions import CassandraBulkActionStore

    return CassandraBulkActionStore(drivers.cassandra(url, "store_url"))


def _sqlite_queue_holds(url: str, shards: int, drivers: Drivers) -> QueueHoldStore:
    from tikk.store.sqlite.queue_holds import SqliteQueueHoldStore

    return SqliteQueueHoldStore(split_url("store_url", url)[1])


def _cassandra_queue_holds(url: str, shards: int, drivers: Drivers) -> QueueHoldStore:
    from tikk.store.cassandra.queue_holds import CassandraQueueHoldStore

    return CassandraQueueHoldStore(drivers.cassandra(url, "store_url"), shards)


def _sqlite_history(url: str, shards: int, drivers: Drivers) -> RunHistory:
    from history.sqlite import SqliteRunHistory

    return SqliteRunHistory(split_url("history_url", url)[1])


def _cassandra_history(url: str, shards: int, drivers: Drivers) -> RunHistory:
    from history.cassandra import CassandraRunHistory

    return CassandraRunHistory(drivers.cassandra(url, "history_url"))


def _sqlite_credentials(url: str, shards: int, drivers: Drivers) -> CredentialStore:
    from tikk.store.sqlite.credentials import SqliteCredentialStore

    return SqliteCredentialStore(split_url("store_url", url)[1])


def _cassandra_credentials(url: str, shards: int, drivers: Drivers) -> CredentialStore:
    from tikk.store.cassandra.credentials import CassandraCredentialStore

    return CassandraCredentialStore(drivers.cassandra(url, "store_url"))


def _local_queue(url: str, shards: int, drivers: Drivers) -> ReadyQueue:
    from dispatcher.ready_queue.local import LocalReadyQueue

    return LocalReadyQueue(split_url("queue_url", url)[1])


def _kafka_queue(url: str, shards: int, drivers: Drivers) -> ReadyQueue:
    from dispatcher.ready_queue.kafka import KafkaReadyQueue

    return KafkaReadyQueue.from_url(url)


# The schedule store lives in the task store's database (same URL).
TASK_STORES: Mapping[str, Callable[[str, int, Drivers], TaskStore]] = {
    "sqlite": _sqlite_tasks,
    "cassandra": _cassandra_tasks,
}
SCHEDULE_STORES: Mapping[str, Callable[[str, int, Drivers], ScheduleStore]] = {
    "sqlite": _sqlite_schedules,
    "cassandra": _cassandra_schedules,
}
# Credentials live in the task store's database too (same URL).
CREDENTIAL_STORES: Mapping[str, Callable[[str, int, Drivers], CredentialStore]] = {
    "sqlite": _sqlite_credentials,
    "cassandra": _cassandra_credentials,
}
# Quotas live in the task store's database too: its usage is counted there.
QUOTA_STORES: Mapping[str, Callable[[str, int, Drivers], QuotaStore]] = {
    "sqlite": _sqlite_quotas,
    "cassandra": _cassandra_quotas,
}
# What is due per minute, counted beside the tasks (the console's upcoming view).
DUE_COUNT_STORES: Mapping[str, Callable[[str, int, Drivers], DueCountStore]] = {
    "sqlite": _sqlite_due_counts,
    "cassandra": _cassandra_due_counts,
}
# Operators' bulk actions and their progress, beside the tasks they act on.
BULK_ACTION_STORES: Mapping[str, Callable[[str, int, Drivers], BulkActionStore]] = {
    "sqlite": _sqlite_bulk_actions,
    "cassandra": _cassandra_bulk_actions,
}
# Paused and rate-limited queues and their parked rows, beside the tasks.
QUEUE_HOLD_STORES: Mapping[str, Callable[[str, int, Drivers], QueueHoldStore]] = {
    "sqlite": _sqlite_queue_holds,
    "cassandra": _cassandra_queue_holds,
}
RUN_HISTORIES: Mapping[str, Callable[[str, int, Drivers], RunHistory]] = {
    "sqlite": _sqlite_history,
    "cassandra": _cassandra_history,
}
READY_QUEUES: Mapping[str, Callable[[str, int, Drivers], ReadyQueue]] = {
    "local": _local_queue,
    "kafka": _kafka_queue,
}


def build(
    table: Mapping[str, Callable[[str, int, Drivers], T]],
    setting: str,
    url: str,
    shard_count: int,
    drivers: Drivers,
) -> T:
    """The backend ``table`` has for ``url``'s scheme, not started yet."""
    scheme, _ = split_url(setting, url)
    factory = table.get(scheme)
    if factory is None:
        known = ", ".join(table)
        raise InvalidArgument(setting, f"unsupported scheme {scheme!r} (known: {known})")
    return factory(url, shard_count, drivers)


async def started(backend: B, check: Callable[[B], Awaitable[None]] | None = None) -> B:
    """``backend`` after ``start()`` (and ``check``); closed again if either failed."""
    try:
        await backend.start()
        if check is not None:
            await check(backend)
    except BaseException:
        await backend.close()
        raise
    return backend


async def open_store(settings: Settings, drivers: Drivers) -> TaskStore:
    """The task store, started and checked against the shard count stored with the data."""
    url, shards = settings.store_url, settings.shard_count
    store = build(TASK_STORES, "store_url", url, shards, drivers)
    return await started(store, lambda s: s.check_shard_count())


async def open_schedules(settings: Settings, drivers: Drivers) -> ScheduleStore:
    url, shards = settings.store_url, settings.shard_count
    return await started(build(SCHEDULE_STORES, "store_url", url, shards, drivers))


async def open_credentials(settings: Settings, drivers: Drivers) -> CredentialStore:
    url, shards = settings.store_url, settings.shard_count
    return await started(build(CREDENTIAL_STORES, "store_url", url, shards, drivers))


async def open_quotas(settings: Settings, drivers: Drivers) -> QuotaStore:
    url, shards = settings.store_url, settings.shard_count
    return await started(build(QUOTA_STORES, "store_url", url, shards, drivers))


async def open_due_counts(settings: Settings, drivers: Drivers) -> DueCountStore:
    url, shards = settings.store_url, settings.shard_count
    return await started(build(DUE_COUNT_STORES, "store_url", url, shards, drivers))


async def open_bulk_actions(settings: Settings, drivers: Drivers) -> BulkActionStore:
    url, shards = settings.store_url, settings.shard_count
    return await started(build(BULK_ACTION_STORES, "store_url", url, shards, drivers))


async def open_queue_holds(settings: Settings, drivers: Drivers) -> QueueHoldStore:
    url, shards = settings.store_url, settings.shard_count
    return await started(build(QUEUE_HOLD_STORES, "store_url", url, shards, drivers))


async def open_history(settings: Settings, drivers: Drivers) -> RunHistory:
    url, shards = settings.history_url, settings.shard_count
    return await started(build(RUN_HISTORIES, "history_url", url, shards, drivers))


async def open_queue(settings: Settings, drivers: Drivers) -> ReadyQueue:
    url, shards = settings.queue_url, settings.shard_count
    return await started(build(READY_QUEUES, "queue_url", url, shards, drivers))


async def open_ownership(settings: Settings, epoch: int) -> Ownership:
    """Empty URL: this process owns every shard (with ``epoch``). ``zk://``: ZooKeeper."""
    if not settings.ownership_url:
        return SingleOwner(settings.shard_count, epoch)
    scheme, _ = split_url("ownership_url", settings.ownership_url)
    if scheme != "zk":
        raise InvalidArgument("ownership_url", f"unsupported scheme {scheme!r} (known: zk)")
    from dispatcher.ownership.zookeeper import ZkOwnership

    return await started(
        ZkOwnership.from_url(
            settings.ownership_url,
            settings.shard_count,
            session_timeout_s=settings.ownership_session_timeout_ms / 1000,
        )
    )


def migrate(settings: Settings, replication: str, now_ms: int) -> list[str]:
    """Create or upgrade the Cassandra schema of the configured store and history, and start
    the shards' cursors at ``now_ms`` (blocking). SQLite files create their tables when
    opened. Returns the steps applied."""
    from history.cassandra import HISTORY_MIGRATIONS
    from tikk.drivers.cassandra import CassandraConfig, CassandraSession
    from tikk.drivers.cassandra_schema import run_migrations
    from tikk.store.cassandra.schema import STORE_MIGRATIONS, init_cursors, record_shard_count

    applied: list[str] = []
    for url, steps in ((settings.store_url, STORE_MIGRATIONS),
                       (settings.history_url, HISTORY_MIGRATIONS)):  # fmt: skip
        if split_url("url", url)[0] != "cassandra":
            continue
        session = CassandraSession(CassandraConfig.from_url(url))
        session.connect()
        try:
            done = run_migrations(session, steps, replication)
            if steps is STORE_MIGRATIONS:
                record_shard_count(session, settings.shard_count)
                created = init_cursors(session, settings.shard_count, now_ms // 1000)
                applied += [f"cursors of {created} new shard(s)"] if created else []
        finally:
            session.shutdown()
        applied += [f"{m.component} v{m.version}: {m.description}" for m in done]
    return applied


@dataclass
class Backends:
    """Everything a server (and a dispatcher in the same process) stores and publishes with."""

    store: TaskStore
    history: RunHistory
    # The server's producer, for dead-letter streams.
    queue: ReadyQueue
    schedules: ScheduleStore
    quotas: QuotaStore
    due_counts: DueCountStore
    bulk_actions: BulkActionStore
    queue_holds: QueueHoldStore
    # Open when the API checks callers (``settings.security.auth``).
    credentials: CredentialStore | None = None

    async def close(self) -> None:
        if self.credentials is not None:
            await self.credentials.close()
        await self.queue_holds.close()
        await self.bulk_actions.close()
        await self.due_counts.close()
        await self.quotas.close()
        await self.queue.close()
        await self.schedules.close()
        await self.store.close()
        await self.history.close()


async def open_backends(settings: Settings, drivers: Drivers | None = None) -> Backends:
    """Every backend of ``settings``, started; on a failure the ones already started close."""
    drivers = drivers or Drivers()
    async with contextlib.AsyncExitStack() as opened:
        store = await open_store(settings, drivers)
        opened.push_async_callback(store.close)
        history = await open_history(settings, drivers)
        opened.push_async_callback(history.close)
        queue = await open_queue(settings, drivers)
        opened.push_async_callback(queue.close)
        schedules = await open_schedules(settings, drivers)
        opened.push_async_callback(schedules.close)
        quotas = await open_quotas(settings, drivers)
        opened.push_async_callback(quotas.close)
        due_counts = await open_due_counts(settings, drivers)
        opened.push_async_callback(due_counts.close)
        bulk_actions = await open_bulk_actions(settings, drivers)
        opened.push_async_callback(bulk_actions.close)
        queue_holds = await open_queue_holds(settings, drivers)
        opened.push_async_callback(queue_holds.close)
        credentials = None
        if settings.security.auth:
            credentials = await open_credentials(settings, drivers)
        opened.pop_all()
    return Backends(
        store,
        history,
        queue,
        schedules,
        quotas,
        due_counts,
        bulk_actions,
        queue_holds,
        credentials,
    )
