"""Where a Worker's messages come from: its current queue consumer, which the worker puts down
when it pauses (it cannot report results, see ``worker_sdk.worker``) or stops, and opens afresh
when it goes on. It also says when to fetch again while idle: on a ring of the queue's doorbell
where the queue has one (``QueueConsumer.on_arrival``), else on a poll."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence

from tikk.clock import Clock
from tikk.queue_contract import is_new_queue_name
from worker_sdk.queues import open_consumer
from worker_sdk.queues.consumer import GroupTiming, QueueConsumer

log = logging.getLogger("tikk.worker")

# With a doorbell, polling only catches what a ring does not announce (a lease that ran out,
# a bell the producer has not listed yet), which may wait this long.
_RUNG_POLL_S = 0.5


def check_queues(queues: Sequence[str]) -> None:
    """At least one queue, each named by the server's rule for the queue of a new task: a
    queue named otherwise can never receive one."""
    if not queues:
        raise ValueError("a Worker needs at least one queue")
    for queue in queues:
        if not is_new_queue_name(queue):
            raise ValueError(
                f"queue {queue!r}: may contain only A-Z a-z 0-9 _ - (1-128, starting with a "
                "letter or digit, not ending in _dlq); a '.' would collide with '_' in Kafka "
                "topic names and with dead-letter topics"
            )


class Intake:
    """The worker's current queue consumer, opened and started on first use. ``close`` puts it
    down (the worker pauses, or stops); the next ``consumer()`` opens a fresh one. ``clock``
    times the leases of a queue that has them (the local one)."""

    def __init__(
        self,
        url: str,
        queues: Sequence[str],
        visibility_ms: int,
        timing: GroupTiming,
        clock: Clock,
    ) -> None:
        self._open = functools.partial(
            open_consumer, url, queues, visibility_ms, timing, clock=clock
        )
        self._current: QueueConsumer | None = None
        self._started = False
        self._arrived = asyncio.Event()
        self._rung = False  # the current consumer rings on arrivals

    async def consumer(self) -> QueueConsumer:
        """The current consumer, started. Raises ``BackendUnavailable`` if it could not be
        started; the next call starts it again."""
        if self._current is None:
            self._current, self._started = self._open(), False
        if not self._started:
            await self._current.start()
            self._started = True
            self._rung = self._current.on_arrival(self._arrived.set)
        return self._current

    async def idle(self, poll_s: float) -> None:
        """Wait until messages may have arrived: a ring, ``wake``, or a poll interval
        (``poll_s``, or ``_RUNG_POLL_S`` if longer where the queue rings)."""
        wait_s = max(poll_s, _RUNG_POLL_S) if self._rung else poll_s
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):  # no task per wait, unlike wait_for
                await self._arrived.wait()
        self._arrived.clear()

    def wake(self) -> None:
        """End the current ``idle`` now (the worker is stopping)."""
        self._arrived.set()

    async def close(self) -> None:
        """Close the current consumer, if any. A failure is logged only: what the consumer
        had not committed is delivered again either way."""
        current, self._current = self._current, None
        self._rung = False
        if current is None:
            return
        try:
            await current.close()
        except Exception as exc:
            log.warning("closing the queue consumer failed: %s", exc)
