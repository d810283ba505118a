"""Backend selection by URL: the only place that knows which implementations exist.

``sqlite://PATH`` (task store, run history) and ``local://PATH`` (ready queue) form the
embedded default; ``cassandra://``, ``kafka://`` and ``zk://`` the production stack.
Optional backends are imported lazily, so their drivers are only needed when configured.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.ownership import Ownership, SingleOwner
from dispatcher.ready_queue import ReadyQueue
from history.run_history import RunHistory
from tikk.errors import InvalidArgument
from tikk.settings import Settings
from tikk.store.schedules import ScheduleStore
from tikk.store.tasks import TaskStore
from tikk.urls import split_url


async def open_store(settings: Settings) -> TaskStore:
    scheme, rest = split_url("store_url", settings.store_url)
    if scheme == "sqlite":
        from tikk.store.sqlite.tasks import SqliteTaskStore

        store = SqliteTaskStore(rest, settings.shard_count)
        await store.check_shard_count()
        return store
    if scheme == "cassandra":
        from tikk.store.cassandra.tasks import CassandraTaskStore

        cstore = CassandraTaskStore(settings.store_url, settings.shard_count)
        await cstore.connect()
        try:
            await cstore.check_shard_count()
        except BaseException:
            await cstore.close()
            raise
        return cstore
    raise InvalidArgument(
        "store_url", f"unsupported task store {scheme!r} (known: sqlite, cassandra)"
    )


async def open_schedules(settings: Settings) -> ScheduleStore:
    """The schedule store lives in the task store's database (same URL)."""
    scheme, rest = split_url("store_url", settings.store_url)
    if scheme == "sqlite":
        from tikk.store.sqlite.schedules import SqliteScheduleStore

        return SqliteScheduleStore(rest)
    if scheme == "cassandra":
        from tikk.store.cassandra.schedules import CassandraScheduleStore

        schedules = CassandraScheduleStore(settings.store_url)
        await schedules.connect()
        return schedules
    raise InvalidArgument(
        "store_url", f"unsupported task store {scheme!r} (known: sqlite, cassandra)"
    )


async def open_history(settings: Settings) -> RunHistory:
    scheme, rest = split_url("history_url", settings.history_url)
    if scheme == "sqlite":
        from history.sqlite import SqliteRunHistory

        return SqliteRunHistory(rest)
    if scheme == "cassandra":
        from history.cassandra import CassandraRunHistory

        history = CassandraRunHistory(settings.history_url)
        await history.connect()
        return history
    raise InvalidArgument(
        "history_url", f"unsupported run history {scheme!r} (known: sqlite, cassandra)"
    )


def migrate(settings: Settings, replication: str, now_ms: int) -> list[str]:
    """Create or upgrade the Cassandra schema of the configured store and history, and start
    the shards' cursors at ``now_ms`` (blocking). SQLite files create their tables when
    opened. Returns the steps applied."""
    from history.cassandra import HISTORY_MIGRATIONS
    from tikk.drivers.cassandra import CassandraConfig, CassandraSession
    from tikk.store.cassandra.schema import STORE_MIGRATIONS, init_cursors, record_shard_count
    from tikk.store.cassandra.schema import migrate as run_migrations

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
            session.close()
        applied += [f"{m.component} v{m.version}: {m.description}" for m in done]
    return applied


def open_queue(settings: Settings) -> ReadyQueue:
    scheme, rest = split_url("queue_url", settings.queue_url)
    if scheme == "local":
        from dispatcher.ready_queue.local import LocalReadyQueue

        return LocalReadyQueue(rest)
    if scheme == "kafka":
        from dispatcher.ready_queue.kafka import KafkaReadyQueue

        return KafkaReadyQueue.from_url(settings.queue_url)
    raise InvalidArgument("queue_url", f"unsupported ready queue {scheme!r} (known: local, kafka)")


def open_ownership(settings: Settings, epoch: int) -> Ownership:
    """Empty URL: this process owns every shard (with ``epoch``). ``zk://``: ZooKeeper."""
    if not settings.ownership_url:
        return SingleOwner(settings.shard_count, epoch)
    scheme, _ = split_url("ownership_url", settings.ownership_url)
    if scheme == "zk":
        from dispatcher.ownership.zookeeper import ZkOwnership

        return ZkOwnership.from_url(
            settings.ownership_url,
            settings.shard_count,
            session_timeout_s=settings.ownership_session_timeout_ms / 1000,
        )
    raise InvalidArgument("ownership_url", f"unsupported ownership {scheme!r} (known: zk)")


@dataclass
class Backends:
    store: TaskStore
    history: RunHistory
    # The server's producer, for dead-letter streams.
    queue: ReadyQueue
    schedules: ScheduleStore

    async def close(self) -> None:
        await self.queue.close()
        await self.schedules.close()
        await self.store.close()
        await self.history.close()


async def open_backends(settings: Settings) -> Backends:
    store = await open_store(settings)
    history = await open_history(settings)
    queue = open_queue(settings)
    await queue.start()
    return Backends(store, history, queue, await open_schedules(settings))
