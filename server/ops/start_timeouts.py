"""Schedule-to-start timeouts: an attempt no worker started in time is dead-lettered.

A task may carry a start timeout. When the dispatcher claims an attempt of such a task it
writes a *start deadline* row into the due index (``DueEntry.start_deadline``), due when the
timeout runs out. Workers ask the server before they run such an attempt
(``TaskStore.claim_start``); when the deadline row comes due, the dispatcher that owns the
shard asks the store to expire the attempt (``TaskStore.expire_start``). One of the two wins,
so an attempt either runs or is dead-lettered with error type ``StartTimeout``, never both:
a queue that no worker consumes (a typo, a retired service) no longer holds tasks DISPATCHED
for ever. The expiry is recorded like any dead letter: a run record in the history and a copy
on the queue's dead-letter stream.

The server uses the same ``StartExpiry`` for a worker that asks too late.
"""

from __future__ import annotations

import logging

from history.run_history import RunHistory
from tikk.model import START_TIMEOUT, Delivery, DueEntry, RunRecord, RunStatus, Task
from tikk.ready_queue import ReadyQueue
from tikk.store.tasks import TaskStore
from tikk.telemetry import Telemetry

log = logging.getLogger("tikk.dispatcher")


def expiry_reason(entry: DueEntry) -> str:
    """Why an attempt expired, in words an operator can act on."""
    return (
        f"attempt {entry.attempt} was not started within {entry.start_timeout_ms / 1000:g} s "
        f"of its due time (is anything consuming queue {entry.queue!r}?)"
    )


class StartExpiry:
    """Expires attempts whose start timeout ran out, and records what it expired."""

    def __init__(
        self, store: TaskStore, history: RunHistory, queue: ReadyQueue,
        telemetry: Telemetry | None = None,
    ) -> None:  # fmt: skip
        self._store = store
        self._history = history
        self._queue = queue
        self._telemetry = telemetry or Telemetry()

    async def expire(self, entry: DueEntry, now_ms: int) -> Task | None:
        """Expire the attempt of ``entry`` (a delivery row, not the deadline row) unless a
        worker started it; returns the dead-lettered task, or None if it started or moved on.
        Safe to repeat after a failure part-way: the records are written again."""
        reason = expiry_reason(entry)
        task = await self._store.expire_start(entry, reason, now_ms)
        if task is None:
            return None
        await self._history.append(_record(entry, reason, now_ms))
        delivery = Delivery(entry, now_ms)
        await self._queue.publish_dead_letter(delivery, START_TIMEOUT, reason)
        self._telemetry.dead_lettered(entry.queue)
        log.warning("task %s/%s dead-lettered: %s", entry.namespace, entry.task_id, reason)
        return task


def _record(entry: DueEntry, reason: str, now_ms: int) -> RunRecord:
    """The run record of an expiry: no worker ran it; its id is fixed per attempt, so a
    repeated expiry records it once."""
    return RunRecord(
        namespace=entry.namespace,
        run_id=f"start-timeout:{entry.task_id}:{entry.attempt}:{entry.due_ms}",
        task_id=entry.task_id,
        queue=entry.queue,
        handler=entry.handler,
        attempt=entry.attempt,
        status=RunStatus.DEAD_LETTERED,
        scheduled_ms=entry.scheduled_ms,
        due_ms=entry.due_ms,
        fired_ms=now_ms,
        started_ms=now_ms,
        finished_ms=now_ms,
        worker_id="",
        error_type=START_TIMEOUT,
        error_message=reason,
        idempotency_key=entry.idempotency_key,
    )
