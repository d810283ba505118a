"""The runs a Worker has in flight: the handler slot each one holds while its handler runs,
the place it keeps in the result backlog while its result waits for the server, and the message
it holds all along.

A run's handler slot frees when its handler returns, not when the server acknowledges its
result: a server that is away for a few seconds then delays acknowledgements, not starts.
The message is still committed only after the acknowledgement (``worker_sdk.commits``), so
the run keeps holding it, and its lease is renewed, until then. What bounds those waiting
results is the backlog: every message held (running, or with a result not yet acknowledged)
counts against it, so the results waiting can never exceed it, and once it is full the Worker
fetches nothing more until acknowledgements come back (back-pressure). Why a bound at all:
each held message is uncommitted (a crash delivers it again, and on Kafka the partition's
offset cannot pass it), its lease is renewed, and its result is kept in memory to be sent again.

A run whose handler has limits of its own (``worker_sdk.gates``) may wait for them: while it
waits it holds no handler slot and no place in the backlog, only a place among the waiting
(``WAITING_PER_SLOT`` times the slots), so a handler held by its own limits never stops other
handlers' messages from being fetched and run. Once its limits let it start it runs at once,
taking a handler slot even when the others are busy meanwhile: so the handlers running may
exceed ``limit`` by the runs a handler's limits released while every slot was busy (with a
concurrency limit, the run releasing the place still holds its slot for a moment; with a rate,
starts may fall due while the slots are busy).

A delivery that arrived before it is due (the dispatcher's lead, ``worker_sdk.lead``) is
*early*: it holds no handler slot and no place in the backlog until it is due, only a place
among the early ones (``max_early``; the lead bounds how many arrive, this bounds memory if a
dispatcher's lead is larger than the worker expects). Once due it takes a handler slot as soon
as one is free, before the Worker fetches more. A worker that steps aside drops its early
runs: their messages go to other workers, which start them at their due time.

While a message is held, its lease is renewed through the consumer the message came from, even
after the Worker moved on to a fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass

from worker_sdk.queues.consumer import Message, QueueConsumer

log = logging.getLogger("tikk.worker")

# The default backlog, in multiples of the concurrency: one, so by default a worker holds no
# more than it runs, as before the backlog existed. A larger one (``result_backlog``) keeps a
# worker starting runs through a server restart of a few seconds, but what it holds is run
# again when its partitions move (a step aside, a rebalance), and on Kafka so is every finished
# message behind it: with four times that, duplicate starts under the fault suite's faults
# rose several-fold, so the default waits until a step aside hands over less.
BACKLOG_PER_SLOT = 1
# How many runs may wait for their handler's own limits, in multiples of the slots: enough to
# look past a run of one handler's messages to the next handler's, bounded so that a queue
# full of one held handler's messages is not all fetched into memory.
WAITING_PER_SLOT = 4


def backlog_for(concurrency: int, backlog: int | None) -> int:
    """The backlog for ``concurrency`` handler slots: ``backlog``, or ``BACKLOG_PER_SLOT``
    times the slots if None. ``ValueError`` if there is no slot, or if the backlog is smaller
    than ``concurrency`` (the slots could never all be used)."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least one")
    chosen = BACKLOG_PER_SLOT * concurrency if backlog is None else backlog
    if chosen < concurrency:
        raise ValueError(
            f"result backlog ({chosen}) must be at least the concurrency ({concurrency})"
        )
    return chosen


@dataclass(frozen=True)
class Held:
    """A message being worked on and the consumer it came from: its commit and lease renewals
    go to that consumer, even after the worker moved on to a fresh one."""

    consumer: QueueConsumer
    message: Message


class InFlight:
    """Runs (asyncio tasks), each with the message it holds: at most ``limit`` running their
    handler, and at most ``backlog`` (``limit`` if None) held in all.

    A run holds a handler slot from ``add`` until it calls ``ran`` (its handler returned) or
    ends, and its message until it ends. ``until_free`` sleeps until slots free: one event set
    whenever a slot or a place in the backlog frees, rather than a wait registered on every run
    in flight each time (that cost grew with the limit).
    """

    def __init__(self, limit: int, backlog: int | None = None, max_early: int = 10_000) -> None:
        self.backlog = backlog_for(limit, limit if backlog is None else backlog)
        self.limit = limit
        self.max_early = max_early
        self._runs: dict[asyncio.Task[None], Held] = {}
        self._reporting: set[asyncio.Task[None]] = set()  # handler returned, message held
        self._waiting: set[asyncio.Task[None]] = set()  # held by its handler's own limits
        self._early: set[asyncio.Task[None]] = set()  # not due yet (or due, without a slot)
        # Due early runs waiting for a slot, first come first: (its wake-up, the run).
        self._due: deque[tuple[asyncio.Future[None], asyncio.Task[None]]] = deque()
        self._ended = asyncio.Event()
        self._woken = False
        self._full = False  # whether the backlog filled and has not drained to half

    def __len__(self) -> int:
        return len(self._runs)

    @property
    def running(self) -> int:
        """How many runs hold a handler slot."""
        return len(self._runs) - len(self._reporting) - len(self._waiting) - len(self._early)

    @property
    def reporting(self) -> int:
        """How many runs' handlers returned while their message is still held (their result
        waits for the server's acknowledgement)."""
        return len(self._reporting)

    @property
    def free(self) -> int:
        """How many messages may be fetched now: a handler slot for each, room in the backlog
        for each once its handler returns, and a place among the waiting for each in case its
        handler's limits hold it."""
        waiting, early = len(self._waiting), len(self._early)
        return max(
            0,
            min(
                self.limit - self.running,
                self.backlog - (len(self._runs) - waiting - early),
                WAITING_PER_SLOT * self.limit - waiting,
                self.max_early - early,
            ),
        )

    def add(self, run: asyncio.Task[None], held: Held) -> None:
        """Count ``run`` in flight, in a handler slot, until it ends."""
        self._runs[run] = held
        run.add_done_callback(self._end)

    def ran(self) -> None:
        """Called by a run (the current task) once its handler returned: its handler slot
        frees, and its message stays held until the run ends."""
        run = asyncio.current_task()
        if run is not None and run in self._runs and run not in self._reporting:
            self._reporting.add(run)
            self._freed()

    @property
    def early(self) -> int:
        """How many runs wait for their due time (or, due, for a handler slot)."""
        return len(self._early)

    async def hold_early(self, until_due: Awaitable[None]) -> None:
        """Called by a run (the current task) whose delivery is not due yet: it holds no
        handler slot while ``until_due`` runs, then waits for a free one."""
        run = asyncio.current_task()
        if run is None or run not in self._runs:
            await until_due
            return
        self._early.add(run)
        self._freed()
        try:
            await until_due
            if self.running >= self.limit or self._due:
                slot = asyncio.get_running_loop().create_future()
                self._due.append((slot, run))
                await slot  # ``_freed`` hands the slots out in turn, one wake-up each
        finally:
            self._early.discard(run)

    def drop_early(self) -> int:
        """Cancel the runs not started yet for their due time (the worker steps aside:
        their messages go to other workers); how many."""
        early = list(self._early)
        for run in early:
            run.cancel()
        if early:
            log.warning("%d early deliveries dropped unstarted: others take them", len(early))
        return len(early)

    def _freed(self) -> None:
        """A slot or a place may have freed: due early runs take free slots first."""
        free = self.limit - self.running
        while free > 0 and self._due:
            slot, run = self._due.popleft()
            if not slot.done():  # not cancelled meanwhile
                slot.set_result(None)
                self._early.discard(run)  # running from now: the next slot is another's
                free -= 1
        self._ended.set()

    def waiting(self) -> None:
        """Called by a run (the current task) that waits for its handler's limits: it holds
        no handler slot until ``admitted``."""
        run = asyncio.current_task()
        if run is not None and run in self._runs:
            self._waiting.add(run)
            self._freed()

    def admitted(self) -> None:
        """Called by a run once its handler's limits let it start (or it stopped waiting)."""
        run = asyncio.current_task()
        if run is not None:
            self._waiting.discard(run)

    def _end(self, run: asyncio.Task[None]) -> None:
        del self._runs[run]
        self._reporting.discard(run)
        self._waiting.discard(run)
        self._early.discard(run)
        self._freed()
        if self._full:
            self._note_backlog()

    def wake(self) -> None:
        """Make every ``until_free`` return at once, from now on (the worker is stopping)."""
        self._woken = True
        self._ended.set()

    async def until_free(self, slots: int, timeout_s: float) -> None:
        """Return once ``slots`` slots are free (or after ``wake``), after ``timeout_s`` at
        most."""
        self._note_backlog()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self.free < slots and not self._woken:
                    self._ended.clear()
                    await self._ended.wait()

    def _note_backlog(self) -> None:
        """Log when the backlog fills, and when it has drained to half: why nothing is
        fetched. (Half, not one free place: a slow server would otherwise have a full backlog
        logged at every acknowledgement.)"""
        held = len(self._runs)
        if held >= self.backlog and not self._full:
            log.warning("result backlog full (%d message(s) held, %d of them waiting for the "
                        "server): fetching paused", held, self.reporting)  # fmt: skip
            self._full = True
        elif self._full and held <= self.backlog // 2:
            log.warning("result backlog drained to %d message(s) of %d: the server "
                        "acknowledges again", held, self.backlog)  # fmt: skip
            self._full = False

    async def drain(self, timeout_s: float) -> None:
        """Let the runs in flight finish, for ``timeout_s`` at most."""
        if self._runs:
            await asyncio.wait(list(self._runs), timeout=timeout_s)

    def cancel(self) -> None:
        """Cancel every run still in flight (their messages are delivered again)."""
        for run in list(self._runs):
            run.cancel()

    async def renew(self, every_s: float) -> None:
        """Extend the leases of the messages held every ``every_s`` (those whose result waits
        for the server too), each through the consumer it came from (a closed one does
        nothing: its messages go to others anyway). Runs until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            by_consumer: dict[QueueConsumer, list[Message]] = {}
            for held in list(self._runs.values()):
                by_consumer.setdefault(held.consumer, []).append(held.message)
            for consumer, messages in by_consumer.items():
                with contextlib.suppress(Exception):
                    await consumer.extend(messages)
