"""The embedded ready queue: a SQLite file that local worker processes consume from.

The table, and how a consumer leases and commits its messages, is part of the queue's contract
(``tikk.queue_contract``: ``LOCAL_QUEUE_SCHEMA``, ``LocalQueueSql``); the consumer side is
``worker_sdk.queues.local``. After each publish the queue rings the consumers' doorbell
(``tikk.queue_doorbell``), so a waiting worker fetches at once instead of on its next poll.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence

from tikk import delivery_codec
from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.model import Delivery
from tikk.queue_contract import (
    LOCAL_QUEUE_SCHEMA,
    LocalQueueSql,
    dead_letter_queue,
    is_dead_letter_queue,
)
from tikk.queue_doorbell import DoorbellRinger
from tikk.ready_queue import QueueBacklog, with_idle


class LocalReadyQueue:
    """``ReadyQueue`` on a SQLite file (``local:///path/queue.db``). Constructing it does no
    I/O; ``start`` opens the file (creating it and its table if needed)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._db: SqliteRunner | None = None
        self._bell = DoorbellRinger(path)
        # Queues this process prepared or published to, reported even when nothing waits.
        self._queues: set[str] = set()

    def __repr__(self) -> str:
        return f"LocalReadyQueue({self._path!r})"

    async def start(self) -> None:
        if self._db is None:
            self._db = SqliteRunner(self._path, LOCAL_QUEUE_SCHEMA)
            await self._db.start()

    def _runner(self) -> SqliteRunner:
        if self._db is None:
            raise RuntimeError(f"{self!r} is not started: await start() first")
        return self._db

    async def prepare(self, queues: Collection[str]) -> None:
        # A queue is just a column value here: there is nothing to create.
        self._runner()  # not started is an error here too, as in every other call
        self._queues.update(queues)

    async def publish(self, deliveries: Sequence[Delivery]) -> None:
        db = self._runner()
        self._queues.update(d.entry.queue for d in deliveries)
        rows = [
            (d.entry.queue, d.entry.key, delivery_codec.encode_delivery(d), d.fired_ms, d.fired_ms)
            for d in deliveries
        ]

        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.executemany(LocalQueueSql.INSERT, rows)

        if rows:
            await db.run(work)
            self._bell.ring()

    async def publish_dead_letter(
        self, delivery: Delivery, error_type: str, error_message: str
    ) -> None:
        db = self._runner()
        self._queues.add(delivery.entry.queue)
        body = delivery_codec.encode_dead_letter(
            delivery, error_type, error_message, delivery.fired_ms
        )
        row = (
            dead_letter_queue(delivery.entry.queue),
            delivery.entry.key,
            body,
            delivery.fired_ms,
            delivery.fired_ms,
        )

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(LocalQueueSql.INSERT, row)

        await db.run(work)
        self._bell.ring()

    async def backlog(self, queues: Collection[str] = ()) -> list[QueueBacklog]:
        def work(conn: sqlite3.Connection) -> list[tuple[str, int, int]]:
            return conn.execute(LocalQueueSql.BACKLOG).fetchall()

        rows = await self._runner().run(work)
        found = {
            queue: QueueBacklog(queue, waiting, oldest)
            for queue, waiting, oldest in rows
            if not is_dead_letter_queue(queue)
        }
        return with_idle(found, self._queues | set(queues))

    async def ping(self) -> None:
        await self._runner().ping()

    async def close(self) -> None:
        self._bell.close()
        if self._db is not None:
            await self._db.close()
