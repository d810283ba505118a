"""Schedule-to-start timeouts: the port through which an attempt no worker started in time is
given up.

A task may carry a start timeout. When the dispatcher claims an attempt of such a task it
writes a *start deadline* row into the due index (``DueEntry.start_deadline``), due when the
timeout runs out. Workers ask the server before they run such an attempt
(``TaskStore.claim_start``); when the deadline row comes due, the dispatcher that owns the
shard asks its ``StartExpiry`` to expire the attempt (``TaskStore.expire_start``). One of the
two wins, so an attempt either runs or is dead-lettered with error type ``StartTimeout``,
never both: a queue that no worker consumes (a typo, a retired service) no longer holds tasks
DISPATCHED for ever.

The implementation records an expiry like any dead letter (``server.ops.start_timeouts``);
the server uses the same one for a worker that asks too late.
"""

from __future__ import annotations

from typing import Protocol

from tikk.model import DueEntry, Task


class StartExpiry(Protocol):
    async def expire(self, entry: DueEntry, now_ms: int) -> Task | None:
        """Dead-letter the attempt of ``entry`` (a delivery row, not its deadline row) unless
        a worker started it; returns the dead-lettered task, or None if the attempt started
        or moved on. Safe to repeat after a failure part-way: the records are written again.
        Raises ``BackendUnavailable``."""
        ...
