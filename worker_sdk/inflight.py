"""The runs a Worker has in flight: one slot each, and the message each one holds.

A run keeps its slot until its result is acknowledged (then its message waits for the next
commit batch, see ``worker_sdk.commits``). While it runs, its message's lease is renewed
through the consumer the message came from, even after the Worker moved on to a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from worker_sdk.queues.consumer import Message, QueueConsumer


@dataclass(frozen=True)
class Held:
    """A message being worked on and the consumer it came from: its commit and lease renewals
    go to that consumer, even after the worker moved on to a fresh one."""

    consumer: QueueConsumer
    message: Message


class InFlight:
    """At most ``limit`` runs (asyncio tasks), each with the message it holds.

    ``until_free`` sleeps until slots free: one event set by each run as it ends, rather than a
    wait registered on every run in flight each time (that cost grew with the limit).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("at least one run must be allowed in flight")
        self.limit = limit
        self._runs: dict[asyncio.Task[None], Held] = {}
        self._ended = asyncio.Event()
        self._woken = False

    def __len__(self) -> int:
        return len(self._runs)

    @property
    def free(self) -> int:
        return self.limit - len(self._runs)

    def add(self, run: asyncio.Task[None], held: Held) -> None:
        """Count ``run`` in flight until it ends."""
        self._runs[run] = held
        run.add_done_callback(self._end)

    def _end(self, run: asyncio.Task[None]) -> None:
        del self._runs[run]
        self._ended.set()

    def wake(self) -> None:
        """Make every ``until_free`` return at once, from now on (the worker is stopping)."""
        self._woken = True
        self._ended.set()

    async def until_free(self, slots: int, timeout_s: float) -> None:
        """Return once ``slots`` slots are free (or after ``wake``), after ``timeout_s`` at
        most."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self.free < slots and not self._woken:
                    self._ended.clear()
                    await self._ended.wait()

    async def drain(self, timeout_s: float) -> None:
        """Let the runs in flight finish, for ``timeout_s`` at most."""
        if self._runs:
            await asyncio.wait(list(self._runs), timeout=timeout_s)

    def cancel(self) -> None:
        """Cancel every run still in flight (their messages are delivered again)."""
        for run in list(self._runs):
            run.cancel()

    async def renew(self, every_s: float) -> None:
        """Extend the leases of the messages in flight every ``every_s``, each through the
        consumer it came from (a closed one does nothing: its messages go to others anyway).
        Runs until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            by_consumer: dict[QueueConsumer, list[Message]] = {}
            for held in list(self._runs.values()):
                by_consumer.setdefault(held.consumer, []).append(held.message)
            for consumer, messages in by_consumer.items():
                with contextlib.suppress(Exception):
                    await consumer.extend(messages)
