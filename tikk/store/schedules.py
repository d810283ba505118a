"""The schedule store interface: schedules by id, written together with their tick rows.

A schedule and its tick (``Schedule.tick``) live beside the tasks in the task store's
database, so that one step can create an occurrence's task, write the next tick and advance
the schedule. Backends: ``tikk.store.sqlite.schedules`` (embedded, one transaction) and
``tikk.store.cassandra.schedules`` (tasks and tick first, then the schedule row under a lightweight
transaction). Every method may raise ``BackendUnavailable``.

A tick stands for the schedule's pending occurrence only while it matches the stored schedule
(same ``next_nominal_ms`` and ``next_fire_ms``); ticks left behind by an update, a delete or a
lost race are stale and skipped by the dispatcher, never deleted eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tikk.model import Page, Task
from tikk.schedules.model import Schedule


@dataclass(frozen=True)
class StepWrite:
    """One ``step`` of ``step_many``."""

    schedule: Schedule
    expected_version: int
    tasks: Sequence[Task]


class ScheduleStore(Protocol):
    """Durable home of schedules. Safe to share between coroutines of one event loop."""

    async def create(self, schedule: Schedule) -> tuple[Schedule, bool]:
        """Store a new schedule (``version`` 1) and its tick.

        Idempotent: if the schedule exists with the same ``fingerprint`` it is returned with
        ``False``. Raises ``AlreadyExists`` if the id is taken with other content.
        """
        ...

    async def get(self, namespace: str, schedule_id: str) -> Schedule:
        """The schedule; raises ``NotFound``."""
        ...

    async def list(self, namespace: str, page_size: int, page_token: str) -> Page[Schedule]:
        """Schedules of a namespace, each exactly once across the pages, ordered by id.
        Raises ``InvalidArgument`` for a malformed token."""
        ...

    async def replace(self, schedule: Schedule, expected_version: int) -> Schedule:
        """Store ``schedule`` as version ``expected_version + 1`` with its tick, if the stored
        version is ``expected_version``. Returns what was stored. Raises ``NotFound``, or
        ``Conflict`` when another write came first."""
        ...

    async def delete(self, namespace: str, schedule_id: str, expected_version: int | None) -> None:
        """Remove the schedule (its tick goes stale). ``expected_version`` None deletes any
        version. Raises ``NotFound`` or ``Conflict``. Tasks already created stay."""
        ...

    async def step(self, schedule: Schedule, expected_version: int, tasks: Sequence[Task]) -> bool:
        """One step of the chain: create ``tasks`` (an existing task of the same id is left
        as it is), write the tick of ``schedule`` and store it as version
        ``expected_version + 1``, if the stored version is still ``expected_version``.

        Returns False when the schedule changed or vanished meanwhile; the caller re-reads.
        A backend without transactions may have created the tasks and tick of a lost step;
        tasks of an occurrence that was due are still correct to run, and the tick is stale.
        """
        ...

    async def get_many(self, keys: Sequence[tuple[str, str]]) -> Sequence[Schedule | None]:
        """``get`` for each (namespace, id), in order; None where there is no schedule."""
        ...

    async def step_many(self, steps: Sequence[StepWrite]) -> Sequence[bool]:
        """``step`` for each, in order, with its outcome; backends may write them together
        (the dispatcher steps every schedule that comes due at one instant at once)."""
        ...

    async def start(self) -> None:
        """Open connections and files (nothing is opened by the constructor). A backend
        sharing a driver session with others starts it if none has yet."""
        ...

    async def close(self) -> None:
        """Release what ``start`` opened; idempotent."""
        ...
