"""Consumer of the embedded ready queue (``dispatcher.ready_queue.local`` is the producer side;
the table and the statements on it are ``tikk.queue_contract``'s)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tikk.clock import Clock, SystemClock
from tikk.drivers.sqlite import create_private
from tikk.errors import BackendUnavailable
from tikk.queue_contract import LocalQueueSql
from tikk.queue_doorbell import Doorbell
from worker_sdk.queues.consumer import Message, decode_delivery


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction around the block (the connection autocommits otherwise, so
    ``executemany`` alone would be a transaction per row)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class LocalQueueConsumer:
    """Leases messages from the queue file; a lease lasts ``visibility_ms`` unless extended.

    Constructing it does no I/O; ``start`` opens the file. After ``close`` (its thread is
    gone), ``commit`` and ``extend`` do nothing: a message not committed by then is leased to
    whoever fetches it once its lease ran out. ``clock`` (the system clock by default) says
    when a lease runs out; the dispatcher stamps messages visible with the same wall clock.
    """

    def __init__(
        self,
        path: str,
        queues: Sequence[str],
        visibility_ms: int,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._path = path
        self._queues = list(queues)
        self._visibility_ms = visibility_ms
        self._clock = clock or SystemClock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-queue")
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._bell = Doorbell(path)

    def __repr__(self) -> str:
        return f"LocalQueueConsumer({self._path!r}, {self._queues})"

    async def start(self) -> None:
        if self._closed:
            raise BackendUnavailable("local queue: the consumer is closed")
        if self._conn is None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._connect)

    def _connect(self) -> None:
        if self._conn is not None:
            return
        try:
            # A worker may be the first to open the queue: the file is created private, as
            # the server would create it (it holds every task's payload).
            if self._path != ":memory:":
                create_private(Path(self._path))
            conn = sqlite3.connect(self._path, isolation_level=None, timeout=30.0)
            conn.execute("PRAGMA busy_timeout=30000")
            # Without a sync per transaction: a power loss may undo the last leases and
            # commits, and each such message is delivered again, which at-least-once allows.
            # (The WAL keeps a process crash from losing anything.)
            conn.execute("PRAGMA synchronous=NORMAL")
        except (sqlite3.OperationalError, OSError) as exc:
            raise BackendUnavailable(f"local queue: {exc}") from exc
        self._conn = conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._conn is None:
            if self._closed:
                raise BackendUnavailable("local queue: the consumer is closed")
            raise RuntimeError(f"{self!r} is not started: await start() first")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._guarded, fn, *args)

    def _guarded(self, fn: Any, *args: Any) -> Any:
        assert self._conn is not None  # set by start, on this thread; cleared only by close
        try:
            return fn(self._conn, *args)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # the dispatcher has not created the queue yet: nothing to consume
            raise BackendUnavailable(f"local queue: {exc}") from exc

    async def fetch(self, max_messages: int) -> list[Message]:
        result: list[Message] = await self._run(self._fetch, max_messages)
        return result

    def _fetch(self, conn: sqlite3.Connection, max_messages: int) -> list[Message]:
        now = self._clock.now_ms()
        # One token for the whole batch: a receipt is (id, lease), unique per message and
        # lease, so a token per message would only cost a random draw each.
        lease = uuid.uuid4().hex
        visible = LocalQueueSql.visible(len(self._queues))
        # Look before taking the write lock: an idle worker polls often, and the dispatcher
        # writing to the queue should not wait behind polls that find nothing.
        if not conn.execute(visible, [*self._queues, now, 1]).fetchone():
            return []
        with _transaction(conn):
            rows = conn.execute(visible, [*self._queues, now, max_messages]).fetchall()
            until = now + self._visibility_ms
            conn.executemany(LocalQueueSql.LEASE, [(until, lease, row[0]) for row in rows])
        return [
            Message(decode_delivery(body), int(deliveries) + 1, (msg_id, lease), body)
            for msg_id, body, deliveries in rows
        ]

    def on_arrival(self, wake: Callable[[], None]) -> bool:
        return not self._closed and self._bell.open(wake)

    async def commit(self, message: Message) -> None:
        await self.commit_many([message])

    async def commit_many(self, messages: Sequence[Message]) -> None:
        if messages and not self._closed:
            await self._run(self._commit_many, [m.receipt for m in messages])

    @staticmethod
    def _commit_many(conn: sqlite3.Connection, receipts: list[tuple[int, str]]) -> None:
        with _transaction(conn):
            conn.executemany(LocalQueueSql.COMMIT, receipts)

    async def extend(self, messages: Sequence[Message]) -> None:
        if messages and not self._closed:
            await self._run(self._extend, [m.receipt for m in messages])

    def _extend(self, conn: sqlite3.Connection, receipts: list[tuple[int, str]]) -> None:
        until = self._clock.now_ms() + self._visibility_ms
        with _transaction(conn):
            conn.executemany(
                LocalQueueSql.EXTEND, [(until, msg_id, lease) for msg_id, lease in receipts]
            )

    async def close(self) -> None:
        def shut(conn: sqlite3.Connection) -> None:
            conn.close()
            self._conn = None

        self._closed = True  # before any await: no commit may reach the closing executor
        self._bell.close()
        if self._conn is not None:
            await self._run(shut)
        self._executor.shutdown(wait=True)
