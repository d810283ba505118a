"""Domain types of tikk: frozen dataclasses, no protobuf.

Times are integer milliseconds since the Unix epoch (UTC) throughout the core.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

DEFAULT_NAMESPACE = "default"
# The error type of an attempt dead-lettered because no worker started it in time.
START_TIMEOUT = "StartTimeout"


class TaskState(enum.IntEnum):
    """Lifecycle of a task; values equal the ``tikk.v1.TaskState`` numbers."""

    SCHEDULED = 1
    DISPATCHED = 2
    SUCCEEDED = 3
    DEAD_LETTERED = 4
    CANCELLED = 5

    @property
    def finished(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.DEAD_LETTERED, TaskState.CANCELLED)


class RunStatus(enum.IntEnum):
    """Outcome of one run; values equal the ``tikk.v1.RunStatus`` numbers."""

    SUCCEEDED = 1
    FAILED = 2
    DEAD_LETTERED = 3
    # The task was cancelled while the run went on (see ``ResultRecorder``).
    CANCELLED = 4


class ResultKind(enum.IntEnum):
    """What a worker reports about a run; values equal ``tikk.v1.ResultKind``."""

    SUCCEEDED = 1
    FAILED = 2
    RETRY = 3
    FAILED_PERMANENTLY = 4
    # Not an outcome: a worker asks to start an attempt that has a start timeout.
    STARTED = 5
    # The worker stopped the run: its task was cancelled while it ran.
    CANCELLED = 6


@dataclass(frozen=True)
class RetryPolicy:
    """How failed runs are retried (see ``tikk.backoff``)."""

    max_attempts: int = 3
    initial_backoff_ms: int = 1_000
    multiplier: float = 2.0
    max_backoff_ms: int = 300_000
    jitter: float = 1.0


@dataclass(frozen=True)
class Task:
    """A one-off task and where it stands.

    ``scheduled_ms`` is the instant the occurrence was scheduled for and never changes across
    retries; ``due_ms`` is when the current attempt may start (never earlier).
    """

    namespace: str
    task_id: str
    queue: str
    handler: str
    payload: bytes
    labels: Mapping[str, str]
    retry: RetryPolicy
    state: TaskState
    attempt: int
    due_ms: int
    scheduled_ms: int
    created_ms: int
    updated_ms: int
    shard: int
    # Digest of the request that created the task, for idempotent re-creation; empty when
    # the server chose the id (see ``id_assigned``).
    fingerprint: str
    last_error_type: str = ""
    last_error_message: str = ""
    # W3C trace context (``traceparent``/``tracestate``) of the call that created the task;
    # every attempt's spans join that trace. Empty when tracing is off.
    trace_context: Mapping[str, str] = field(default_factory=dict)
    # The schedule this task is an occurrence of; empty for a one-off task.
    schedule_id: str = ""
    # 0: none. Each attempt must be started within this long of its due time, or it is
    # dead-lettered (see ``DueEntry.start_deadline``).
    start_timeout_ms: int = 0
    # 0: none. How long one run may take before its worker stops it.
    execution_timeout_ms: int = 0

    @property
    def idempotency_key(self) -> str:
        return occurrence_key(self.namespace, self.schedule_id or self.task_id, self.scheduled_ms)

    def cancelled_running(self, attempt: int, due_ms: int) -> bool:
        """Whether the task was cancelled while it ran this attempt (``Abandon``), as opposed
        to cancelled before any run of it."""
        return (
            self.state is TaskState.CANCELLED
            and (self.attempt, self.due_ms) == (attempt, due_ms)
            and self.last_error_type == CANCELLED_RUNNING
        )

    @property
    def id_assigned(self) -> bool:
        """Whether the server chose this task's id: fresh, so its create needs no existence
        check. Only a create under a client's id can come again, so only it is fingerprinted."""
        return not self.fingerprint

    def entry(self) -> DueEntry:
        """The due-index row of the current attempt."""
        return DueEntry(
            shard=self.shard,
            due_ms=self.due_ms,
            namespace=self.namespace,
            task_id=self.task_id,
            attempt=self.attempt,
            queue=self.queue,
            handler=self.handler,
            payload=self.payload,
            labels=self.labels,
            max_attempts=self.retry.max_attempts,
            scheduled_ms=self.scheduled_ms,
            trace_context=self.trace_context,
            schedule_id=self.schedule_id,
            start_timeout_ms=self.start_timeout_ms,
            execution_timeout_ms=self.execution_timeout_ms,
        )

    def evolve(self, **changes: object) -> Task:
        return replace(self, **changes)  # type: ignore[arg-type]


def occurrence_key(namespace: str, task_or_schedule_id: str, scheduled_ms: int) -> str:
    """The idempotency key of one occurrence: same for every delivery and retry of it.

    For a schedule's occurrence it is built from the schedule id, so every run of the
    occurrence ``(schedule, instant)`` (fired, backfilled) carries the same key.
    """
    return f"{namespace}/{task_or_schedule_id}@{scheduled_ms}"


@dataclass(frozen=True)
class DueEntry:
    """One row of the due index: all the dispatcher needs to publish, without a second read."""

    shard: int
    due_ms: int
    namespace: str
    task_id: str
    attempt: int
    queue: str
    handler: str
    payload: bytes
    labels: Mapping[str, str] = field(default_factory=dict)
    max_attempts: int = 1
    scheduled_ms: int = 0
    trace_context: Mapping[str, str] = field(default_factory=dict)
    # Set on a schedule's occurrence tasks and on its tick (see ``tikk.schedules.model``).
    schedule_id: str = ""
    # The queue accepted this row's delivery (recorded after the fact, best effort): an owner
    # taking the shard over need not send it again.
    handed_off: bool = False
    # The task's schedule-to-start timeout and execution timeout (0: none).
    start_timeout_ms: int = 0
    execution_timeout_ms: int = 0

    @property
    def is_tick(self) -> bool:
        """A schedule's pending occurrence, not a task: the dispatcher steps the schedule."""
        return self.attempt == 0 and bool(self.schedule_id)

    @property
    def is_start_deadline(self) -> bool:
        """Not a delivery: the instant attempt ``-attempt`` of the task must have been started
        by (``start_deadline``). The dispatcher expires the attempt if no worker started it."""
        return self.attempt < 0

    def goes_out_ms(self, lead_ms: int) -> int:
        """When it goes out: a task ``lead_ms`` before due, a tick or deadline at due."""
        return self.due_ms if self.is_tick or self.is_start_deadline else self.due_ms - lead_ms

    def start_deadline(self) -> DueEntry:
        """The row that comes due when this attempt's start timeout runs out. It shares the
        task's clustering key, in a later second than the attempt's own row, and is written
        before the attempt is published, so any later row of the task overwrites it (which
        is right: a later row means this attempt is over)."""
        return replace(self, attempt=-self.attempt, due_ms=self.due_ms + self.start_timeout_ms)

    def guarded_attempt(self) -> DueEntry:
        """For a ``start_deadline`` row: the attempt's own row, whose start it guards."""
        return replace(self, attempt=-self.attempt, due_ms=self.due_ms - self.start_timeout_ms)

    @property
    def second(self) -> int:
        return self.due_ms // 1000

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.task_id}"

    @property
    def position(self) -> tuple[int, str]:
        """Clustering order inside a shard: (second, task key)."""
        return (self.second, self.key)

    @property
    def idempotency_key(self) -> str:
        return occurrence_key(self.namespace, self.schedule_id or self.task_id, self.scheduled_ms)


@dataclass(frozen=True)
class Claimed:
    """What ``TaskStore.mark_dispatched`` lets through: the rows to publish, and how many of
    them were DISPATCHED already (a delivery of them may exist: publishing is a possible
    duplicate, counted so failovers show what they cost). ``unfinished``: rows not fired
    because their task's create has not finished yet (a store that writes a create in more
    than one step); the dispatcher reads them again later."""

    entries: list[DueEntry]
    resent: int = 0
    unfinished: list[DueEntry] = field(default_factory=list)


@dataclass(frozen=True)
class Delivery:
    """A due task as handed to the ready queue.

    ``trace_context`` is that of the dispatch span (a child of the task's), which the worker's
    run span continues; empty when the dispatcher does not trace.
    """

    entry: DueEntry
    fired_ms: int
    trace_context: Mapping[str, str] = field(default_factory=dict)
    # The dispatcher's proof that it published this delivery (``tikk.delivery_tokens``);
    # empty until signed.
    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class Cursor:
    """Per-shard dispatch cursor: every index row with second <= ``second`` was handed off."""

    second: int
    epoch: int


@dataclass(frozen=True)
class Succeed:
    """Transition of a dispatched attempt: it succeeded."""


@dataclass(frozen=True)
class RetryAt:
    """Transition of a dispatched attempt: schedule attempt + 1 at ``due_ms``."""

    due_ms: int
    error_type: str
    error_message: str


@dataclass(frozen=True)
class DeadLetter:
    """Transition of a dispatched attempt: give up and dead-letter the task."""

    error_type: str
    error_message: str


# The error type ``Abandon`` leaves on the task it cancelled while an attempt ran.
CANCELLED_RUNNING = "Cancelled"


@dataclass(frozen=True)
class Abandon:
    """Transition of a dispatched attempt: stop tracking it; the task ends CANCELLED and a
    result its worker reports later changes nothing (a schedule's ``CANCEL_PREVIOUS``)."""

    reason: str


Transition = Succeed | RetryAt | DeadLetter | Abandon


def apply_transition(task: Task, transition: Transition, now_ms: int) -> Task:
    """The task after a dispatched attempt ended with ``transition`` (same for every backend)."""
    match transition:
        case Succeed():
            return task.evolve(state=TaskState.SUCCEEDED, updated_ms=now_ms)
        case RetryAt(due_ms=due_ms, error_type=etype, error_message=emsg):
            return task.evolve(
                state=TaskState.SCHEDULED, attempt=task.attempt + 1, due_ms=due_ms,
                updated_ms=now_ms, last_error_type=etype, last_error_message=emsg,
            )  # fmt: skip
        case DeadLetter(error_type=etype, error_message=emsg):
            return task.evolve(
                state=TaskState.DEAD_LETTERED, updated_ms=now_ms,
                last_error_type=etype, last_error_message=emsg,
            )  # fmt: skip
        case Abandon(reason=reason):
            return task.evolve(
                state=TaskState.CANCELLED, updated_ms=now_ms,
                last_error_type=CANCELLED_RUNNING, last_error_message=reason,
            )  # fmt: skip


@dataclass(frozen=True)
class RunRecord:
    """One append-only record of a run, as stored in the run history.

    ``started_ms`` and ``finished_ms`` are what the worker reported, kept as data: a worker's
    clock (or a hostile worker) may say anything. ``recorded_ms`` is when the server recorded
    the run, on its own clock; the history files and lists runs by it, so no report can hide
    a run from a query of recent runs. A record stored before servers kept that time reads
    back with its finish time there.
    """

    namespace: str
    run_id: str
    task_id: str
    queue: str
    handler: str
    attempt: int
    status: RunStatus
    scheduled_ms: int
    due_ms: int
    fired_ms: int
    started_ms: int
    finished_ms: int
    recorded_ms: int
    worker_id: str
    error_type: str = ""
    error_message: str = ""
    output: bytes = b""
    idempotency_key: str = ""
    # The stack trace the worker reported for a failed run; empty otherwise.
    traceback: str = ""

    @classmethod
    def of(
        cls,
        entry: DueEntry,
        *,
        run_id: str,
        status: RunStatus,
        fired_ms: int,
        started_ms: int,
        finished_ms: int,
        recorded_ms: int | None = None,
        worker_id: str = "",
        error_type: str = "",
        error_message: str = "",
        output: bytes = b"",
        traceback: str = "",
    ) -> RunRecord:
        """The record of one run of ``entry``'s attempt. ``recorded_ms`` None: the finish time,
        for a run the server itself ends at one instant of its clock (a start timeout)."""
        recorded = finished_ms if recorded_ms is None else recorded_ms
        return cls(
            namespace=entry.namespace, run_id=run_id, task_id=entry.task_id, queue=entry.queue,
            handler=entry.handler, attempt=entry.attempt, status=status,
            scheduled_ms=entry.scheduled_ms, due_ms=entry.due_ms, fired_ms=fired_ms,
            started_ms=started_ms, finished_ms=finished_ms, recorded_ms=recorded,
            worker_id=worker_id, error_type=error_type, error_message=error_message,
            output=output, idempotency_key=entry.idempotency_key, traceback=traceback,
        )  # fmt: skip


@dataclass(frozen=True)
class RunQuery:
    """Runs of ``queue`` the server recorded in [start_ms, end_ms) (``RunRecord.recorded_ms``),
    optionally of one status."""

    namespace: str
    queue: str
    start_ms: int
    end_ms: int
    status: RunStatus | None = None


@dataclass(frozen=True)
class RunReport:
    """What a worker reported about one run of a delivery (echoed with its token)."""

    run_id: str
    delivery: Delivery
    kind: ResultKind
    started_ms: int
    finished_ms: int
    worker_id: str
    error_type: str = ""
    error_message: str = ""
    output: bytes = b""
    retry_after_ms: int | None = None
    traceback: str = ""

    @property
    def entry(self) -> DueEntry:
        """The attempt the run was of."""
        return self.delivery.entry

    @property
    def fired_ms(self) -> int:
        return self.delivery.fired_ms

    def record(self, status: RunStatus, recorded_ms: int) -> RunRecord:
        """The history's record of this run, ending in ``status``, recorded by the server at
        ``recorded_ms`` (its own clock, whatever times the worker reported)."""
        return RunRecord.of(
            self.entry, run_id=self.run_id, status=status, fired_ms=self.fired_ms,
            started_ms=self.started_ms, finished_ms=self.finished_ms, recorded_ms=recorded_ms,
            worker_id=self.worker_id, error_type=self.error_type,
            error_message=self.error_message, output=self.output, traceback=self.traceback,
        )  # fmt: skip


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; ``next_token`` is empty on the last page."""

    items: list[T]
    next_token: str = ""


def fingerprint(*parts: object) -> str:
    """A stable digest of the given request parts (for idempotent creates)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else repr(part).encode()
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()
