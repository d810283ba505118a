"""Fixtures the worker tests share: the real embedded ready queue (an SQLite file) and a real
``WorkerService`` on loopback (``tests.worker_server``) whose workers consume it. A module
that defines a fixture of the same name uses its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from tests.worker_server import WorkerServer


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[LocalReadyQueue]:
    """The queue file ``queue.db`` in ``tmp_path``, queue ``q`` prepared."""
    producer = LocalReadyQueue(str(tmp_path / "queue.db"))
    await producer.start()
    await producer.prepare(["q"])
    yield producer
    await producer.close()


@pytest.fixture
async def server(queue: LocalReadyQueue, tmp_path: Path) -> AsyncIterator[WorkerServer]:
    """A server that hands its workers the queue of ``queue``."""
    s = WorkerServer(queue_url=f"local://{tmp_path / 'queue.db'}")
    await s.start()
    yield s
    await s.stop()
