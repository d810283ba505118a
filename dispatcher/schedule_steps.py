"""Stepping a schedule whose tick came due: the dispatcher's side of recurring schedules.

For a tick it reads the schedule by key (never a scan), lets ``tikk.schedules.planner`` decide, and
writes the occurrences' tasks, the next tick and the schedule in one store step, conditional on
the version it read. A step that lost a race with an update re-reads and decides again; a tick
that no longer matches its schedule (updated, deleted) is dropped. Records of the decisions go
to the run history after the step, so a replayed step (a crash before the tick was
acknowledged) writes the same records again rather than none.
"""

from __future__ import annotations

import asyncio
import logging

from history.run_history import RunHistory
from tikk.clock import Clock
from tikk.errors import BackendUnavailable, CancelUnsettled, FailedPrecondition, NotFound
from tikk.model import Abandon, DueEntry, Task, TaskState
from tikk.schedules.model import OccurrenceRecord, Overlap, Schedule
from tikk.schedules.planner import PlannedStep, is_current, plan_step
from tikk.store.schedules import ScheduleStore, StepWrite
from tikk.store.tasks import TaskStore
from tikk.telemetry import Telemetry

log = logging.getLogger("tikk.dispatcher")

# Re-reads after lost races before the tick is put back for a later attempt.
_ATTEMPTS = 10


class ScheduleStepper:
    def __init__(
        self,
        schedules: ScheduleStore,
        store: TaskStore,
        history: RunHistory,
        clock: Clock,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._schedules = schedules
        self._store = store
        self._history = history
        # Read by a cancel when it checks and when it is written (``TaskStore.cancel``).
        self._clock = clock
        self._telemetry = telemetry or Telemetry()

    async def step_all(self, ticks: list[DueEntry], now_ms: int) -> list[DueEntry]:
        """Step every tick; returns the rows the steps wrote (new occurrence tasks and next
        ticks). Stale ticks write nothing.

        In bulk: one read of all schedules, one store write, one history write. Steps that
        lost a race with a client's change are decided again on the re-read schedule.
        """
        written: list[DueEntry] = []
        pending = ticks
        for _ in range(_ATTEMPTS):
            pending = await self._step_once(pending, now_ms, written)
            if not pending:
                return written
        raise BackendUnavailable(f"{len(pending)} schedule(s) keep changing; retrying later")

    async def _step_once(
        self, ticks: list[DueEntry], now_ms: int, written: list[DueEntry]
    ) -> list[DueEntry]:
        """One bulk attempt; extends ``written`` and returns the ticks whose step lost."""
        found = await self._schedules.get_many([(t.namespace, t.schedule_id) for t in ticks])
        current = [
            (tick, s) for tick, s in zip(ticks, found, strict=True)
            if s is not None and is_current(s, tick.scheduled_ms, tick.due_ms)
        ]  # fmt: skip
        plans = await asyncio.gather(*(self._plan(s, now_ms) for _, s in current))
        steps = [
            StepWrite(plan.schedule, s.version, tasks)
            for (_, s), (plan, tasks) in zip(current, plans, strict=True)
        ]
        done = await self._schedules.step_many(steps)
        records: list[OccurrenceRecord] = []
        lost: list[DueEntry] = []
        for (tick, _), (plan, tasks), ok in zip(current, plans, done, strict=True):
            if ok:
                records += plan.records
                written += _rows(plan, tasks)
            else:
                lost.append(tick)
        if records:
            await self._history.record_occurrences(records)
            self._telemetry.occurrences(records)
        return lost

    async def _plan(self, schedule: Schedule, now_ms: int) -> tuple[PlannedStep, list[Task]]:
        running = await self._previous_running(schedule)
        plan = plan_step(schedule, now_ms, running)
        if plan.cancel_previous:
            await self._cancel_previous(schedule, now_ms)
        return plan, [schedule.occurrence_task(o.nominal_ms, now_ms, now_ms) for o in plan.fire]

    async def _previous_running(self, schedule: Schedule) -> bool:
        # Only the overlap policies other than ALLOW look at the previous occurrence.
        if not schedule.last_task_id or schedule.policy.overlap is Overlap.ALLOW:
            return False
        try:
            task = await self._store.get(schedule.namespace, schedule.last_task_id)
        except NotFound:
            return False
        return not task.state.finished

    async def _cancel_previous(self, schedule: Schedule, now_ms: int) -> None:
        ns, task_id = schedule.namespace, schedule.last_task_id
        try:
            task = await self._store.get(ns, task_id)
            if task.state is TaskState.SCHEDULED:
                await self._store.cancel(ns, task_id, self._clock)
            elif task.state is TaskState.DISPATCHED:
                reason = f"cancelled: a later occurrence of schedule {schedule.schedule_id} started"
                await self._store.finish_attempt(ns, task_id, task.attempt, Abandon(reason), now_ms)
        except (NotFound, FailedPrecondition, CancelUnsettled) as exc:
            # Finished meanwhile, or too close to its retry to cancel safely: it runs (or,
            # unsettled, may run once).
            log.info(
                "schedule %s: previous occurrence not cancelled: %s", schedule.schedule_id, exc
            )


def _rows(plan: PlannedStep, tasks: list[Task]) -> list[DueEntry]:
    following = plan.schedule.tick()
    return [t.entry() for t in tasks] + ([following] if following else [])
