"""What a handler receives, and the exceptions it raises to steer retries."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# Why a run is told to stop (``TaskContext.cancel_reason``).
CANCEL_REQUESTED = "cancel requested"
TIMED_OUT = "timed out"
SHUTTING_DOWN = "worker shutting down"


def run_interrupted() -> bool:
    """Whether the current run itself is being cancelled (the worker stops), rather than
    only its handler's coroutine: such a run is neither reported nor recorded."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


# Stops are rare, so one lock serves every run's: a run's own state stays a flag. (An Event
# per run, which nothing waits on, built a Condition for every run: 3 % of a worker's CPU.)
_STOPPING = threading.Lock()


class RunControl:
    """The worker's handle on one run: ``stop`` tells the handler, through its context, and
    cancels an async handler's coroutine (from any thread). The first reason given stays."""

    def __init__(self) -> None:
        self._stopped = False
        self.reason = ""
        self._task: asyncio.Future[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def stopped(self) -> bool:
        return self._stopped

    def attach(self, task: asyncio.Future[Any]) -> None:
        """The coroutine ``stop`` cancels (an async handler's, running on this loop)."""
        self._task, self._loop = task, asyncio.get_running_loop()
        if self.stopped:
            task.cancel()

    def stop(self, reason: str) -> None:
        with _STOPPING:
            if self._stopped:
                return
            self.reason = reason
            self._stopped = True
        if self._task is not None and self._loop is not None and not self._task.done():
            self._loop.call_soon_threadsafe(self._task.cancel)


@dataclass(frozen=True)
class TaskContext:
    """Facts about the run in progress.

    ``idempotency_key`` is the same for every delivery and every retry of one occurrence:
    use it to make a side effect happen once even though a task may be delivered twice.

    ``resources`` is where middleware leaves what it opened for this run (a database session,
    say) for the handler to use. ``cancelled`` turns true when the run is to stop: its task was
    cancelled while it ran, its timeout ran out, or the worker is shutting down
    (``cancel_reason`` says which); an async handler is cancelled outright, a plain function
    (which cannot be) should look at it between steps, or call ``raise_if_cancelled``, whose
    ``RunCancelled`` records the run as cancelled when its task was.
    """

    namespace: str
    task_id: str
    queue: str
    handler: str
    run_id: str
    attempt: int
    max_attempts: int
    scheduled_time: datetime
    due_time: datetime
    fired_time: datetime
    idempotency_key: str
    labels: Mapping[str, str]
    worker_id: str
    # How many times the queue has handed out this message (1 unless redelivered).
    delivery_count: int
    resources: dict[str, Any] = field(default_factory=dict)
    control: RunControl = field(default_factory=RunControl, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """Whether the run is to stop (see the class, and ``cancel_reason``)."""
        return self.control.stopped

    @property
    def cancel_reason(self) -> str:
        """Why the run is to stop: ``""`` (it is not), ``CANCEL_REQUESTED`` (its task was
        cancelled while it ran), ``TIMED_OUT`` or ``SHUTTING_DOWN``."""
        return self.control.reason

    def raise_if_cancelled(self) -> None:
        """Raise ``RunCancelled`` if the run is to stop."""
        if self.control.stopped:
            raise RunCancelled(f"run {self.run_id} of task {self.task_id!r} was told to stop "
                               f"({self.control.reason})")  # fmt: skip


class Retry(Exception):
    """Raise to retry after a chosen delay instead of the policy's backoff. Still bounded by
    the task's max attempts."""

    def __init__(self, after: float | timedelta, reason: str = "") -> None:
        seconds = after.total_seconds() if isinstance(after, timedelta) else float(after)
        if seconds < 0:
            raise ValueError("Retry(after=...) must not be negative")
        super().__init__(reason or f"retry requested after {seconds:g}s")
        self.after_seconds = seconds


class NonRetryableError(Exception):
    """Raise when repeating cannot help (bad payload, permanent refusal): the task is
    dead-lettered at once with this error."""


class RunCancelled(Exception):
    """Raised in a handler whose run was told to stop (``TaskContext.raise_if_cancelled``)."""


class HandlerTimeout(Exception):
    """A run went on past its handler's timeout: it was stopped, and fails as any error does
    (retried per the task's policy)."""
