"""Opening backends at start-up with patience.

A process of the replicated deployment is often started while one of its backends is not
answering yet: a dispatcher restarted by its supervisor during a ZooKeeper election, a server
brought up beside a Cassandra node that is still replaying its commit log, every process of
a machine that is busy starting its JVMs. Exiting at once would leave the retry to the
supervisor (a crash loop, a restart counter, an alert) for an outage of seconds. So a process
keeps trying what answered ``BackendUnavailable`` for ``[server] start_patience_ms``, logging
each failed attempt, and gives up only then, with the last error. A refusal
(``BackendRefused``: wrong credentials) or a bad setting is not retried: time will not mend
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tikk.clock import Clock
from tikk.errors import BackendUnavailable

log = logging.getLogger("tikk")

T = TypeVar("T")

FIRST_WAIT_MS = 250
MAX_WAIT_MS = 5_000


async def patiently(
    open_: Callable[[], Awaitable[T]],
    *,
    what: str,
    patience_ms: int,
    clock: Clock,
    stop: asyncio.Event,
    first_wait_ms: int = FIRST_WAIT_MS,
) -> T:
    """``open_()``'s result, calling it again after a ``BackendUnavailable`` (waits doubling
    from ``first_wait_ms`` up to ``MAX_WAIT_MS``) until ``patience_ms`` has passed since the
    first attempt or ``stop`` is set; then the last error is raised. ``what`` names the
    thing opened in the log lines."""
    deadline = clock.now_ms() + patience_ms
    wait_ms = first_wait_ms
    attempt = 1
    while True:
        try:
            return await open_()
        except BackendUnavailable as exc:
            left_ms = deadline - clock.now_ms()
            if stop.is_set() or left_ms <= 0:
                raise
            wait_ms = min(wait_ms, left_ms)
            log.warning(
                "%s did not open (attempt %d): %s; trying again in %.2fs, for %.0fs more",
                what,
                attempt,
                exc,
                wait_ms / 1000,
                left_ms / 1000,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait_ms / 1000)
            wait_ms = min(wait_ms * 2, MAX_WAIT_MS)
            attempt += 1
