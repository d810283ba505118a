"""What a client asks for, in Python values: tasks, retry policies, schedules.

Times are timezone-aware ``datetime``s, spans are ``timedelta``s, payloads are bytes (a
``str`` is sent as UTF-8). The server validates everything and answers INVALID_ARGUMENT
naming the field; these classes only refuse what cannot be sent at all (a naive datetime,
two "when"s at once).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

CatchUp = Literal["skip", "run_once", "run_all"]
Overlap = Literal["allow", "skip", "buffer_one", "cancel_previous"]


def require_aware(value: datetime | None, name: str) -> None:
    """Refuse a naive datetime: which zone it meant cannot be known."""
    if value is not None and value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware (e.g. datetime.now(UTC))")


@dataclass(frozen=True)
class RetryOptions:
    """How a failed run is retried; a field left ``None`` takes the server's default
    (3 attempts, 1 s initial backoff, x2, at most 5 min, full jitter)."""

    max_attempts: int | None = None
    initial_backoff: timedelta | None = None
    multiplier: float | None = None
    max_backoff: timedelta | None = None
    # Fraction of each delay that is randomised, 0.0..1.0.
    jitter: float | None = None


@dataclass(frozen=True)
class TaskSpec:
    """One task to create. Give ``task_id`` to make the create idempotent (an import may then
    be resumed without creating anything twice); empty, the server assigns one.

    ``run_at`` or ``delay`` says when it runs; neither means now.
    """

    queue: str
    handler: str
    # Bytes, text (UTF-8), or a dataclass, pydantic model or plain data (JSON): what a typed
    # handler declares it takes (``tikk.payload_codec``).
    payload: object = b""
    task_id: str = ""
    run_at: datetime | None = None
    delay: timedelta | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    retry: RetryOptions | None = None
    # Dead-letter an attempt that no worker started this long after its due time.
    start_timeout: timedelta | None = None
    # Stop a run that takes longer (instead of its handler's own timeout); retried per policy.
    execution_timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.run_at is not None and self.delay is not None:
            raise ValueError("give run_at or delay, not both")
        require_aware(self.run_at, "run_at")


@dataclass(frozen=True)
class Recurrence:
    """When a schedule fires: exactly one of ``cron`` (5 fields, 6 with seconds first, or a
    macro such as ``@daily``, evaluated in ``timezone``) and ``every`` (elapsed time, at
    instants t with (t - phase) % every == 0)."""

    cron: str = ""
    every: timedelta | None = None
    phase: timedelta | None = None
    # IANA zone name; empty means UTC.
    timezone: str = ""
    # No occurrence before ``start`` or after ``end`` (both inclusive).
    start: datetime | None = None
    end: datetime | None = None
    # Stop after this many fired occurrences; 0 means no cap.
    max_runs: int = 0
    # Each occurrence is delayed by a deterministic share of this.
    jitter: timedelta | None = None

    def __post_init__(self) -> None:
        if bool(self.cron) == (self.every is not None):
            raise ValueError("give exactly one of cron and every")
        require_aware(self.start, "start")
        require_aware(self.end, "end")


@dataclass(frozen=True)
class ScheduleDefinition:
    """A recurring schedule: when (``recurrence``), what each occurrence runs (queue,
    handler, payload, labels, retry) and what to do with missed or overlapping occurrences.

    ``schedule_id`` may be empty on create (the server assigns one). Policies left at their
    defaults take the server's (catch up on the latest missed occurrence within 60 s; allow
    overlap).
    """

    schedule_id: str
    recurrence: Recurrence
    queue: str
    handler: str
    payload: object = b""  # as ``TaskSpec.payload``
    labels: Mapping[str, str] = field(default_factory=dict)
    retry: RetryOptions | None = None
    catch_up: CatchUp | None = None
    # An occurrence found up to this late still fires normally.
    catch_up_window: timedelta | None = None
    # Cap for catch_up="run_all"; 0 means the server's default (100).
    catch_up_max_runs: int = 0
    overlap: Overlap | None = None
    # Pause after this many consecutive failed occurrences; 0 means never.
    pause_after_failures: int = 0


@dataclass(frozen=True)
class TaskSelection:
    """Which tasks of the client's namespace a count or a bulk verb means; every term given
    must hold. Name at least a ``queue``, ``labels`` or the ``"dead_lettered"`` state: the
    server reads the selection through that listing.

    ``labels`` is a selector, e.g. ``"customer=acme,region!=eu"``; ``failed_*`` bound when
    the task last changed state (for a dead letter, when it failed); ``due_*`` its due time;
    each range is [after, before)."""

    queue: str = ""
    labels: str = ""
    state: str | None = None
    error_type: str = ""
    due_after: datetime | None = None
    due_before: datetime | None = None
    failed_after: datetime | None = None
    failed_before: datetime | None = None
