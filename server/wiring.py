"""Backend selection by URL: the only place that knows which implementations exist.

``sqlite://PATH`` (task store, run history) and ``local://PATH`` (ready queue) form the
embedded default. Optional backends are imported lazily, so their drivers are only needed
when configured.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.ownership import Ownership, SingleOwner
from dispatcher.ready_queue import ReadyQueue
from history.base import RunHistory
from tikk.errors import InvalidArgument
from tikk.settings import Settings
from tikk.store import TaskStore
from tikk.urls import split_url


async def open_store(settings: Settings) -> TaskStore:
    scheme, rest = split_url("store_url", settings.store_url)
    if scheme == "sqlite":
        from tikk.sqlite_store import SqliteTaskStore

        store = SqliteTaskStore(rest, settings.shard_count)
        await store.check_shard_count()
        return store
    raise InvalidArgument("store_url", f"unsupported task store {scheme!r} (known: sqlite)")


def open_history(settings: Settings) -> RunHistory:
    scheme, rest = split_url("history_url", settings.history_url)
    if scheme == "sqlite":
        from history.sqlite import SqliteRunHistory

        return SqliteRunHistory(rest)
    raise InvalidArgument("history_url", f"unsupported run history {scheme!r} (known: sqlite)")


def open_queue(settings: Settings) -> ReadyQueue:
    scheme, rest = split_url("queue_url", settings.queue_url)
    if scheme == "local":
        from dispatcher.local_queue import LocalReadyQueue

        return LocalReadyQueue(rest)
    raise InvalidArgument("queue_url", f"unsupported ready queue {scheme!r} (known: local)")


def open_ownership(settings: Settings, epoch: int) -> Ownership:
    """Embedded: this process owns every shard."""
    return SingleOwner(settings.shard_count, epoch)


@dataclass
class Backends:
    store: TaskStore
    history: RunHistory
    # The server's producer, for dead-letter streams.
    queue: ReadyQueue

    async def close(self) -> None:
        await self.queue.close()
        await self.store.close()
        await self.history.close()


async def open_backends(settings: Settings) -> Backends:
    return Backends(await open_store(settings), open_history(settings), open_queue(settings))
