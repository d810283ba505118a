"""Committing the messages whose results the server acknowledged, a batch at a time.

A message may be committed only once the server acknowledged its result (at-least-once).
Committed one by one, each costs a queue transaction (embedded) or a request (Kafka), more
than the rest of a run; so acknowledged messages wait here up to ``linger_s`` and go out
together, one ``commit_many`` per consumer. Waiting longer only widens the window in which a
crash delivers a message again, which at-least-once allows; it delays no run, since a Worker
frees a message's slot once its result is acknowledged.

A failed commit is logged only: the message is delivered again later (its idempotency key lets
a handler notice). A commit for a consumer that was closed meanwhile does nothing (the
consumer protocol promises it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from worker_sdk.queues.consumer import Message, QueueConsumer

log = logging.getLogger("tikk.worker")


class CommitBatcher:
    """Collects acknowledged messages per consumer and commits them in batches.

    Lifecycle: ``start`` runs the background flusher; ``add`` never waits; ``flush`` commits
    everything added so far; ``close`` stops the flusher and flushes what is left.
    """

    def __init__(self, linger_s: float = 0.02) -> None:
        if linger_s < 0:
            raise ValueError(f"linger must not be negative (got {linger_s} s)")
        self._linger_s = linger_s
        self._waiting: dict[QueueConsumer, list[Message]] = {}
        self._added = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._flushing = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tikk-commits")

    def add(self, consumer: QueueConsumer, message: Message) -> None:
        """Commit ``message`` (through the consumer it came from) with the next batch."""
        self._waiting.setdefault(consumer, []).append(message)
        self._added.set()

    async def flush(self) -> None:
        """Commit everything added so far: one ``commit_many`` per consumer."""
        batches, self._waiting = self._waiting, {}
        for consumer, messages in batches.items():
            try:
                await consumer.commit_many(messages)
            except Exception as exc:
                log.warning("committing %d message(s) failed; they may run again: %s",
                            len(messages), exc)  # fmt: skip

    async def close(self) -> None:
        """Commit what is left and stop, without waiting out the linger. A batch being
        committed is let finish, not cancelled: cut off half-way, its messages would all run
        again."""
        self._closing = True
        if self._task is not None:
            if not self._flushing:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _run(self) -> None:
        while not self._closing:
            await self._added.wait()
            await asyncio.sleep(self._linger_s)  # what else is acknowledged meanwhile joins
            self._added.clear()
            self._flushing = True
            try:
                await self.flush()
            finally:
                self._flushing = False
