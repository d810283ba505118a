"""Recurring schedules: the domain types, and how a schedule becomes due-index rows and tasks.

A schedule's pending occurrence is one *tick* row in the ordinary due index, in the schedule's
shard, due at the occurrence's fire instant. No table of schedules is ever scanned: the
dispatcher that owns the shard reads the tick with everything else that is due, decides what
the occurrence does (``tikk.schedules.planner``) and writes the next tick in the same step.

Names: occurrence ``(schedule_id, nominal_ms)`` runs as the task ``<schedule_id>@<nominal_ms>``
and the schedule's tick is keyed ``<schedule_id>@schedule``. Task ids of that shape are reserved
for schedules (``reserved_task_id``), so neither can collide with a task a client named.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tikk.model import DueEntry, RetryPolicy, Task, TaskState, fingerprint
from tikk.schedules.spec import Occurrence, ScheduleSpec

TICK_SUFFIX = "@schedule"
_RESERVED = re.compile(r"(.*)@(\d+|schedule)")


class CatchUp(enum.IntEnum):
    """What happens to occurrences missed by more than the catch-up window; values equal
    ``tikk.v1.CatchUpPolicy``."""

    SKIP = 1
    RUN_ONCE = 2
    RUN_ALL = 3


class Overlap(enum.IntEnum):
    """What an occurrence does while the previous one is unfinished; values equal
    ``tikk.v1.OverlapPolicy``."""

    ALLOW = 1
    SKIP = 2
    BUFFER_ONE = 3
    CANCEL_PREVIOUS = 4


class Outcome(enum.IntEnum):
    """What became of one occurrence; values equal ``tikk.v1.OccurrenceOutcome``."""

    FIRED = 1
    SKIPPED_OVERLAP = 2
    MISSED = 3
    SKIPPED_PAUSED = 4
    BACKFILLED = 5
    TRIGGERED = 6


@dataclass(frozen=True)
class SchedulePolicy:
    catch_up_window_ms: int = 60_000
    catch_up: CatchUp = CatchUp.RUN_ONCE
    # Cap of RUN_ALL: at most this many missed occurrences run (the latest ones).
    catch_up_max_runs: int = 100
    overlap: Overlap = Overlap.ALLOW
    # Pause after this many occurrences in a row were dead-lettered; 0 = never.
    pause_after_failures: int = 0


@dataclass(frozen=True)
class ScheduleAction:
    """What each occurrence runs: the fields a task carries."""

    queue: str
    handler: str
    payload: bytes = b""
    labels: Mapping[str, str] = field(default_factory=dict)
    retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass(frozen=True)
class Schedule:
    """A recurring schedule and where its chain of occurrences stands.

    ``next_nominal_ms``/``next_fire_ms`` name the pending occurrence (the one the tick row
    stands for); both are None once the chain has ended (end bound or run cap). ``version``
    increases with every write, so a writer holding an older copy is refused.
    ``buffered_nominal_ms`` is the pending occurrence when it waits for the previous run
    (overlap ``BUFFER_ONE``).

    Two counters: ``version`` changes with every write (the dispatcher's steps included) and
    is what the store's conditional writes compare; ``revision`` changes only when a client
    changes the schedule (update, pause, resume) or it pauses itself, and is the conflict
    token of the API, which a busy schedule's progress does not invalidate.
    """

    namespace: str
    schedule_id: str
    spec: ScheduleSpec
    action: ScheduleAction
    policy: SchedulePolicy
    shard: int
    created_ms: int
    updated_ms: int
    fingerprint: str
    paused: bool = False
    pause_note: str = ""
    runs: int = 0
    consecutive_failures: int = 0
    next_nominal_ms: int | None = None
    next_fire_ms: int | None = None
    last_fire_ms: int | None = None
    last_task_id: str = ""
    buffered_nominal_ms: int | None = None
    version: int = 1
    revision: int = 1

    def evolve(self, **changes: object) -> Schedule:
        return replace(self, **changes)  # type: ignore[arg-type]

    def with_next(self, occurrence: Occurrence | None) -> Schedule:
        if occurrence is None:
            return self.evolve(next_nominal_ms=None, next_fire_ms=None)
        return self.evolve(next_nominal_ms=occurrence.nominal_ms, next_fire_ms=occurrence.fire_ms)

    @property
    def finished(self) -> bool:
        return self.next_nominal_ms is None

    def tick(self) -> DueEntry | None:
        """The due-index row of the pending occurrence (None when the chain has ended)."""
        if self.next_nominal_ms is None or self.next_fire_ms is None:
            return None
        return DueEntry(
            shard=self.shard,
            due_ms=self.next_fire_ms,
            namespace=self.namespace,
            task_id=self.schedule_id + TICK_SUFFIX,
            attempt=0,
            queue=self.action.queue,
            handler=self.action.handler,
            payload=b"",
            scheduled_ms=self.next_nominal_ms,
            schedule_id=self.schedule_id,
        )

    def occurrence_task(self, nominal_ms: int, due_ms: int, now_ms: int, *, id_ms: int = 0) -> Task:
        """The task that runs occurrence ``nominal_ms``, due at ``due_ms`` (never before).

        ``id_ms`` names a task for a manual trigger (its request instant) when it differs from
        the nominal instant. The fingerprint depends only on the schedule's action and the
        occurrence, so creating the same occurrence twice is idempotent.
        """
        a = self.action
        task_id = occurrence_task_id(self.schedule_id, id_ms or nominal_ms)
        return Task(
            namespace=self.namespace, task_id=task_id, queue=a.queue, handler=a.handler,
            payload=a.payload, labels=a.labels, retry=a.retry, state=TaskState.SCHEDULED,
            attempt=1, due_ms=due_ms, scheduled_ms=nominal_ms, created_ms=now_ms,
            updated_ms=now_ms, shard=self.shard,
            fingerprint=fingerprint(self.namespace, self.schedule_id, nominal_ms, task_id),
            schedule_id=self.schedule_id,
        )  # fmt: skip


@dataclass(frozen=True)
class OccurrenceRecord:
    """What became of one occurrence, kept in the run history (one record per occurrence,
    rewritten in place if the same occurrence is decided again)."""

    namespace: str
    schedule_id: str
    nominal_ms: int
    fire_ms: int
    outcome: Outcome
    decided_ms: int
    task_id: str = ""
    reason: str = ""

    @property
    def lateness_ms(self) -> int:
        """How long after its fire instant the occurrence was decided."""
        return max(0, self.decided_ms - self.fire_ms)


@dataclass(frozen=True)
class OccurrenceQuery:
    """Occurrences of one schedule with nominal instants in [start_ms, end_ms), optionally of
    one outcome."""

    namespace: str
    schedule_id: str
    start_ms: int
    end_ms: int
    outcome: Outcome | None = None


def occurrence_task_id(schedule_id: str, instant_ms: int) -> str:
    return f"{schedule_id}@{instant_ms}"


def reserved_task_id(task_id: str) -> bool:
    """Whether ``task_id`` has the shape of a schedule's occurrence or tick."""
    return _RESERVED.fullmatch(task_id) is not None


def schedule_of(task_id: str) -> str:
    """The schedule a task id of the reserved shape belongs to; empty for any other id."""
    found = _RESERVED.fullmatch(task_id)
    return found.group(1) if found else ""
