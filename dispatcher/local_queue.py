"""The embedded ready queue: a SQLite file that local worker processes consume from.

Table ``messages`` is the contract with ``worker_sdk.local_queue``: a message is visible from
``visible_ms``; a consumer leases it by setting ``visible_ms`` into the future and a fresh
``lease`` token, and deletes it (its commit) once the server has acknowledged the result. A
worker that dies lets its lease run out, and the message is delivered again (at-least-once).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from dispatcher.ready_queue import dead_letter_queue
from tikk import delivery_codec
from tikk.model import Delivery
from tikk.sqlite_runner import SqliteRunner, Transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    message_key TEXT NOT NULL,
    body BLOB NOT NULL,
    enqueued_ms INTEGER NOT NULL,
    visible_ms INTEGER NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 0,
    lease TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, visible_ms, id);
"""


class LocalReadyQueue:
    """``ReadyQueue`` on a SQLite file (``local:///path/queue.db``)."""

    def __init__(self, path: str) -> None:
        self._db = SqliteRunner(path, SCHEMA)

    async def publish(self, deliveries: Sequence[Delivery]) -> None:
        rows = [
            (d.entry.queue, d.entry.key, delivery_codec.encode(d), d.fired_ms, d.fired_ms)
            for d in deliveries
        ]

        def work(conn: sqlite3.Connection) -> None:
            with Transaction(conn):
                conn.executemany(
                    "INSERT INTO messages (queue, message_key, body, enqueued_ms, visible_ms)"
                    " VALUES (?, ?, ?, ?, ?)",
                    rows,
                )

        if rows:
            await self._db.run(work)

    async def publish_dead_letter(
        self, delivery: Delivery, error_type: str, error_message: str
    ) -> None:
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
            conn.execute(
                "INSERT INTO messages (queue, message_key, body, enqueued_ms, visible_ms)"
                " VALUES (?, ?, ?, ?, ?)",
                row,
            )

        await self._db.run(work)

    async def close(self) -> None:
        await self._db.close()
