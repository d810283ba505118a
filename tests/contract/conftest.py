"""Backends under contract: every suite here runs against each implementation listed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dispatcher.local_queue import LocalReadyQueue
from dispatcher.ready_queue import ReadyQueue
from history.base import RunHistory
from history.sqlite import SqliteRunHistory
from tikk.sqlite_store import SqliteTaskStore
from tikk.store import TaskStore
from worker_sdk.consumer import QueueConsumer
from worker_sdk.local_queue import LocalQueueConsumer

SHARDS = 16


@pytest.fixture(params=["sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TaskStore]:
    backend = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    yield backend
    await backend.close()


@pytest.fixture(params=["sqlite"])
async def history(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunHistory]:
    backend = SqliteRunHistory(str(tmp_path / "history.db"))
    yield backend
    await backend.close()


class QueuePair:
    """A producer and a way to make consumers of the same queue backend."""

    def __init__(self, producer: ReadyQueue, path: str) -> None:
        self.producer = producer
        self._path = path
        self._consumers: list[QueueConsumer] = []

    def consumer(self, queues: list[str], visibility_ms: int = 60_000) -> QueueConsumer:
        c = LocalQueueConsumer(self._path, queues, visibility_ms)
        self._consumers.append(c)
        return c

    async def close(self) -> None:
        for c in self._consumers:
            await c.close()
        await self.producer.close()


@pytest.fixture(params=["local"])
async def queue_pair(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[QueuePair]:
    path = str(tmp_path / "queue.db")
    pair = QueuePair(LocalReadyQueue(path), path)
    yield pair
    await pair.close()
