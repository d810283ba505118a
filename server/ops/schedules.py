"""The schedule operations a client starts (create, update, delete, pause, resume, trigger,
backfill, preview, reads), on domain objects: ``ScheduleOps``; ``server.api.schedules`` is
their gRPC face. Creates count against the namespace's ``schedules`` quota, and a trigger
against its task quotas (``server.ops.quotas``), as any create does.

``update`` and ``delete`` may take the version the client read (the schedule's ``revision``,
which only client changes move), and a stale one is a ``Conflict``. Every write is conditional
on the stored row's internal version as well, so a dispatcher step that lands in between is
never overwritten: the change is re-applied to the fresh row. The dispatcher steps schedules
(``dispatcher.schedule_steps``); this module writes a tick only with its schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from history.run_history import RunHistory
from server.ops.quotas import QuotaGate
from tikk.clock import Clock
from tikk.errors import Conflict, InvalidArgument, NotFound
from tikk.model import Page, Task, TaskState, fingerprint
from tikk.ready_queue import ReadyQueue
from tikk.schedules.model import (
    OccurrenceRecord,
    Outcome,
    Schedule,
    ScheduleAction,
    SchedulePolicy,
)
from tikk.schedules.spec import Occurrence, ScheduleSpec, next_occurrence, preview
from tikk.settings import Limits
from tikk.store.schedules import ScheduleStore
from tikk.store.tasks import TaskStore

T = TypeVar("T")
# Re-reads of a pause or resume that keeps losing to the dispatcher's steps.
_ATTEMPTS = 10


def first_occurrence(spec: ScheduleSpec, schedule_id: str, now_ms: int) -> Occurrence | None:
    """The first occurrence at or after ``now_ms``: an instant equal to now still fires."""
    return next_occurrence(spec, now_ms - 1, schedule_id=schedule_id)


class ScheduleOps:
    """The schedule operations, independent of gRPC.

    ``queue`` is the server's ready queue: a schedule's queue is prepared there before the
    schedule is stored with it, and before a task of it is stored, as for any task.
    """

    def __init__(
        self,
        schedules: ScheduleStore,
        store: TaskStore,
        history: RunHistory,
        clock: Clock,
        limits: Limits,
        *,
        queue: ReadyQueue,
        quotas: QuotaGate,
    ) -> None:
        self._schedules = schedules
        self._store = store
        self._history = history
        self._clock = clock
        self._limits = limits
        self._queue = queue
        self._quotas = quotas

    async def create(self, schedule: Schedule) -> Schedule:
        """Store a new schedule (or find the identical one stored before);
        ``ResourceExhausted`` if the namespace holds its quota of schedules."""
        await self._quotas.admit_schedule(schedule.namespace)
        await self._queue.prepare([schedule.action.queue])
        stored, _ = await self._schedules.create(schedule)
        return stored

    async def get(self, namespace: str, schedule_id: str) -> Schedule:
        return await self._schedules.get(namespace, schedule_id)

    async def list_schedules(self, namespace: str, size: int, token: str) -> Page[Schedule]:
        return await self._schedules.list(namespace, size, token)

    async def update(
        self,
        namespace: str,
        schedule_id: str,
        *,
        spec: ScheduleSpec,
        action: ScheduleAction,
        policy: SchedulePolicy,
        expected_revision: int | None = None,
    ) -> Schedule:
        """Replace spec, action and policy; keep the run count, pause state and, when the spec
        is unchanged, the pending occurrence (so an update never skips or repeats one)."""
        now = self._clock.now_ms()
        await self._queue.prepare([action.queue])
        digest = fingerprint(namespace, schedule_id, spec, action, policy)

        def edit(current: Schedule) -> Schedule:
            updated = current.evolve(
                spec=spec, action=action, policy=policy, fingerprint=digest, updated_ms=now,
                revision=current.revision + 1,
            )  # fmt: skip
            if spec == current.spec:
                return updated
            restart = first_occurrence(spec, current.schedule_id, now)
            return updated.evolve(buffered_nominal_ms=None).with_next(restart)

        return await self.change(namespace, schedule_id, edit, expected_revision)

    async def change(
        self,
        namespace: str,
        schedule_id: str,
        edit: Callable[[Schedule], Schedule],
        expected_revision: int | None = None,
    ) -> Schedule:
        """Apply ``edit`` to the stored schedule, re-reading when a step came in between.
        ``expected_revision``: refuse (``Conflict``) if a client changed it since."""

        async def write(current: Schedule) -> Schedule:
            return await self._schedules.replace(edit(current), current.version)

        return await self._retrying(namespace, schedule_id, expected_revision, write)

    async def pause(self, namespace: str, schedule_id: str, note: str) -> Schedule:
        """Pause the schedule: its occurrences are skipped until it is resumed."""
        return await self.change(namespace, schedule_id, _pause(note, self._clock.now_ms()))

    async def resume(self, namespace: str, schedule_id: str) -> Schedule:
        """Resume a paused schedule, its count of consecutive failures reset."""
        return await self.change(namespace, schedule_id, _resume(self._clock.now_ms()))

    async def delete(self, namespace: str, schedule_id: str, expected: int | None) -> None:
        async def write(current: Schedule) -> None:
            await self._schedules.delete(namespace, schedule_id, current.version)

        await self._retrying(namespace, schedule_id, expected, write)

    async def _retrying(
        self,
        namespace: str,
        schedule_id: str,
        expected_revision: int | None,
        write: Callable[[Schedule], Awaitable[T]],
    ) -> T:
        """``write`` the freshly read schedule, conditional on its row version; read again
        when a dispatcher step came in between."""
        for _ in range(_ATTEMPTS):
            current = await self._schedules.get(namespace, schedule_id)
            _check_revision(current, expected_revision)
            try:
                return await write(current)
            except Conflict:
                continue
        raise Conflict(f"schedule {schedule_id!r} keeps changing; try again")

    async def trigger(self, namespace: str, schedule_id: str) -> Task:
        """Run one occurrence now, counted against the namespace's task quotas."""
        now = self._clock.now_ms()
        s = await self._schedules.get(namespace, schedule_id)
        await self._queue.prepare([s.action.queue])  # an older version stored it unprepared
        async with self._quotas.creating({namespace: 1}):
            task, _ = await self._store.create(s.occurrence_task(now, now, now))
        await self._history.record_occurrences(
            [self._record(s, task.task_id, now, Outcome.TRIGGERED)]
        )
        return task

    async def backfill_preview(
        self, namespace: str, schedule_id: str, start_ms: int, end_ms: int
    ) -> list[Occurrence]:
        """The occurrences ``backfill`` of the same range would run (those that already have
        a task are among them: the backfill counts and skips them). Raises as it does."""
        return (await self._backfill_range(namespace, schedule_id, start_ms, end_ms))[1]

    async def backfill_plan(
        self, namespace: str, schedule_id: str, start_ms: int, end_ms: int
    ) -> tuple[list[Occurrence], int]:
        """A dry run of ``backfill``: the occurrences it would create (those with no task
        yet), and how many it would find existing. Raises as it does."""
        s, found = await self._backfill_range(namespace, schedule_id, start_ms, end_ms)
        now = self._clock.now_ms()
        ids = [s.occurrence_task(o.nominal_ms, now, now).task_id for o in found]
        there = await asyncio.gather(*(self._exists(namespace, i) for i in ids))
        fresh = [o for o, exists in zip(found, there, strict=True) if not exists]
        return fresh, len(found) - len(fresh)

    async def _exists(self, namespace: str, task_id: str) -> bool:
        try:
            await self._store.get(namespace, task_id)
        except NotFound:
            return False
        return True

    async def _backfill_range(
        self, namespace: str, schedule_id: str, start_ms: int, end_ms: int
    ) -> tuple[Schedule, list[Occurrence]]:
        if end_ms > self._clock.now_ms():
            raise InvalidArgument("end_time", "backfill covers the past: must not be after now")
        if start_ms >= end_ms:
            raise InvalidArgument("start_time", "must be before end_time")
        s = await self._schedules.get(namespace, schedule_id)
        most = self._limits.max_backfill_occurrences
        found = preview(s.spec, after_ms=start_ms - 1, schedule_id=s.schedule_id,
                        count=most + 1, until_ms=end_ms - 1)  # fmt: skip
        if len(found) > most:
            raise InvalidArgument("end_time", f"the range holds more than {most} occurrences "
                                              "(max_backfill_occurrences); backfill it in "
                                              "parts")  # fmt: skip
        return s, found

    async def backfill(
        self, namespace: str, schedule_id: str, start_ms: int, end_ms: int
    ) -> tuple[int, int]:
        """Run the occurrences with nominal instants in [start_ms, end_ms) now; those that
        already have a task (fired or backfilled before) are counted, not run again."""
        s, found = await self._backfill_range(namespace, schedule_id, start_ms, end_ms)
        now = self._clock.now_ms()
        tasks = [s.occurrence_task(o.nominal_ms, now, now) for o in found]
        await self._queue.prepare([s.action.queue])
        outcomes = await self._store.create_many(tasks)
        created = [t for t, r in zip(tasks, outcomes, strict=True) if isinstance(r, tuple) and r[1]]
        records = [self._record(s, t.task_id, t.scheduled_ms, Outcome.BACKFILLED) for t in created]
        await self._history.record_occurrences(records)
        return len(created), len(tasks) - len(created)

    async def upcoming(
        self,
        namespace: str,
        schedule_id: str,
        *,
        after_ms: int | None,
        count: int,
        until_ms: int | None,
    ) -> tuple[ScheduleSpec, list[Occurrence]]:
        """The stored schedule's spec and its next ``count`` occurrences (and/or those up to
        ``until_ms``): by default from the pending one on, even if it is overdue right now;
        no more than its runs left, and none once it is finished."""
        now = self._clock.now_ms()
        s = await self._schedules.get(namespace, schedule_id)
        if after_ms is None:
            after_ms = now if s.next_nominal_ms is None else min(now, s.next_nominal_ms - 1)
        if s.spec.max_runs is not None:
            count = min(count, max(0, s.spec.max_runs - s.runs))
        if s.next_nominal_ms is None:
            count = 0
        found = preview(
            s.spec, after_ms=after_ms, schedule_id=schedule_id, count=count, until_ms=until_ms
        )
        return s.spec, found

    async def occurrence_finished(
        self, namespace: str, schedule_id: str, task_id: str, state: TaskState
    ) -> None:
        """Count consecutive dead-lettered occurrences; pause at the policy's threshold."""
        now = self._clock.now_ms()
        if state is TaskState.SUCCEEDED:
            edit = _succeeded(now)
        elif state is TaskState.DEAD_LETTERED:
            edit = _dead_lettered(task_id, now)
        else:
            return
        with contextlib.suppress(NotFound):
            await self.change(namespace, schedule_id, edit)

    def _record(
        self, s: Schedule, task_id: str, nominal_ms: int, outcome: Outcome
    ) -> OccurrenceRecord:
        now = self._clock.now_ms()
        return OccurrenceRecord(
            namespace=s.namespace, schedule_id=s.schedule_id, nominal_ms=nominal_ms,
            fire_ms=nominal_ms, outcome=outcome, decided_ms=now, task_id=task_id,
            reason="by request",
        )  # fmt: skip


def _check_revision(current: Schedule, expected: int | None) -> None:
    if expected is not None and current.revision != expected:
        raise Conflict(
            f"schedule {current.schedule_id!r} is at version {current.revision}, not {expected}"
        )


def _succeeded(now_ms: int) -> Callable[[Schedule], Schedule]:
    return lambda s: s.evolve(consecutive_failures=0, updated_ms=now_ms)


def _dead_lettered(task_id: str, now_ms: int) -> Callable[[Schedule], Schedule]:
    def edit(s: Schedule) -> Schedule:
        failures = s.consecutive_failures + 1
        limit = s.policy.pause_after_failures
        if limit and failures >= limit and not s.paused:
            note = f"paused after {failures} consecutive failed occurrences (last: {task_id})"
            return s.evolve(
                consecutive_failures=failures, paused=True, pause_note=note, updated_ms=now_ms,
                revision=s.revision + 1,
            )  # fmt: skip
        return s.evolve(consecutive_failures=failures, updated_ms=now_ms)

    return edit


def _pause(note: str, now_ms: int) -> Callable[[Schedule], Schedule]:
    return lambda s: s.evolve(
        paused=True, pause_note=note, updated_ms=now_ms, revision=s.revision + 1
    )


def _resume(now_ms: int) -> Callable[[Schedule], Schedule]:
    return lambda s: s.evolve(
        paused=False, pause_note="", consecutive_failures=0, updated_ms=now_ms,
        revision=s.revision + 1,
    )  # fmt: skip
