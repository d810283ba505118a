"""What a handler receives, and the exceptions it raises to steer retries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class TaskContext:
    """Facts about the run in progress.

    ``idempotency_key`` is the same for every delivery and every retry of one occurrence:
    use it to make a side effect happen once even though a task may be delivered twice.
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
