"""Expiring attempts whose start timeout ran out (the ``tikk.start_expiry`` port): the
dispatcher asks when a deadline row comes due, the result recorder when a worker asks to start
too late.

An expiry is recorded like any dead letter: a run record in the history (its run id fixed per
attempt, so a repeated expiry records it once), a copy on the queue's dead-letter stream and
the ``tikk.dead_letters`` count.
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


class StartTimeouts:
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
        """See ``tikk.start_expiry.StartExpiry.expire``."""
        reason = expiry_reason(entry)
        task = await self._store.expire_start(entry, reason, now_ms)
        if task is None:
            return None
        run_id = f"start-timeout:{entry.task_id}:{entry.attempt}:{entry.due_ms}"
        record = RunRecord.of(
            entry, run_id=run_id, status=RunStatus.DEAD_LETTERED, fired_ms=now_ms,
            started_ms=now_ms, finished_ms=now_ms, error_type=START_TIMEOUT, error_message=reason,
        )  # fmt: skip
        await self._history.append(record)
        await self._queue.publish_dead_letter(Delivery(entry, now_ms), START_TIMEOUT, reason)
        self._telemetry.dead_lettered(entry.queue)
        log.warning("task %s/%s dead-lettered: %s", entry.namespace, entry.task_id, reason)
        return task
