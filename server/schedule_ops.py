"""The schedule API (``tikk.v1.ScheduleService``): validation, conversion at the edge, and the
operations a client starts (create, update, pause, trigger, backfill, preview).

``UpdateSchedule`` and ``DeleteSchedule`` may take the version the client read (the schedule's
``revision``, which only client changes move), and a stale one is ABORTED. Every write is
conditional on the stored row's internal version as well, so a dispatcher step that lands in
between is never overwritten: the change is re-applied to the fresh row. The dispatcher steps
schedules (``dispatcher.schedule_steps``); this module writes a tick only with its schedule.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from dispatcher.ready_queue import ReadyQueue
from history.run_history import RunHistory
from server import validation
from server.convert import retry_to_proto, task_to_proto
from server.status import maps_errors
from tikk.buckets import shard_of
from tikk.clock import Clock
from tikk.errors import Conflict, InvalidArgument, NotFound
from tikk.model import Task, TaskState, fingerprint
from tikk.paging import page_size
from tikk.schedules.model import OccurrenceRecord, Outcome, Schedule
from tikk.schedules.spec import (
    Occurrence,
    ScheduleSpec,
    format_local,
    next_occurrence,
    preview,
    validate,
)
from tikk.settings import TEN_YEARS_MS, Limits
from tikk.store.schedules import ScheduleStore
from tikk.store.tasks import TaskStore
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import schedules_pb2, schedules_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]
T = TypeVar("T")
_DEFAULT_PREVIEW = 10
# Occurrences one BackfillSchedule call may create.
MAX_BACKFILL = 10_000
# Re-reads of a pause or resume that keeps losing to the dispatcher's steps.
_ATTEMPTS = 10
# The spec module names its own fields; the API's are Durations and Timestamps.
_API_FIELDS = {
    "spec.interval_ms": "spec.interval",
    "spec.phase_ms": "spec.phase",
    "spec.jitter_ms": "spec.jitter",
    "spec.start_ms": "spec.start_time",
    "spec.end_ms": "spec.end_time",
}


def schedule_spec(msg: schedules_pb2.ScheduleSpec, limits: Limits, now_ms: int) -> ScheduleSpec:
    """The validated domain spec of ``msg``; ``InvalidArgument`` names the API field."""
    spec = ScheduleSpec(
        cron=msg.cron,
        interval_ms=validation.duration_ms(msg.interval, "spec.interval", TEN_YEARS_MS),
        phase_ms=validation.duration_ms(msg.phase, "spec.phase", TEN_YEARS_MS),
        timezone=msg.timezone or "UTC",
        start_ms=validation.optional_timestamp_ms(msg, "start_time", "spec.start_time"),
        end_ms=validation.optional_timestamp_ms(msg, "end_time", "spec.end_time"),
        max_runs=msg.max_runs or None,
        jitter_ms=validation.duration_ms(msg.jitter, "spec.jitter", TEN_YEARS_MS),
    )
    try:
        return validate(
            spec,
            now_ms=now_ms,
            min_interval_ms=limits.min_schedule_interval_ms,
            max_fires_per_day=limits.max_fires_per_day,
        )
    except InvalidArgument as exc:
        raise InvalidArgument(_API_FIELDS.get(exc.field, exc.field), exc.reason) from None


def first_occurrence(spec: ScheduleSpec, schedule_id: str, now_ms: int) -> Occurrence | None:
    """The first occurrence at or after ``now_ms``: an instant equal to now still fires."""
    return next_occurrence(spec, now_ms - 1, schedule_id=schedule_id)


def new_schedule(
    msg: schedules_pb2.Schedule, limits: Limits, shard_count: int, now_ms: int
) -> Schedule:
    """A validated schedule from a create request, its first occurrence pending."""
    ns = validation.namespace(msg.namespace, "schedule.namespace")
    sid = validation.schedule_id(msg.id, limits)
    spec = schedule_spec(msg.spec, limits, now_ms)
    action = validation.schedule_action(msg, limits)
    policy = validation.schedule_policy(msg.policy)
    return Schedule(
        namespace=ns,
        schedule_id=sid,
        spec=spec,
        action=action,
        policy=policy,
        shard=shard_of(ns, sid, shard_count),
        created_ms=now_ms,
        updated_ms=now_ms,
        fingerprint=fingerprint(ns, sid, spec, action, policy),
    ).with_next(first_occurrence(spec, sid, now_ms))


def schedule_to_proto(s: Schedule) -> schedules_pb2.Schedule:
    spec, a, p = s.spec, s.action, s.policy
    msg = schedules_pb2.Schedule(
        namespace=s.namespace,
        id=s.schedule_id,
        spec=schedules_pb2.ScheduleSpec(
            cron=spec.cron,
            interval=to_duration(spec.interval_ms),
            phase=to_duration(spec.phase_ms),
            timezone=spec.timezone,
            max_runs=spec.max_runs or 0,
            jitter=to_duration(spec.jitter_ms),
        ),
        queue=a.queue,
        handler=a.handler,
        payload=a.payload,
        labels=dict(a.labels),
        retry_policy=retry_to_proto(a.retry),
        policy=schedules_pb2.SchedulePolicy(
            catch_up_window=to_duration(p.catch_up_window_ms),
            catch_up=int(p.catch_up),  # type: ignore[arg-type]
            catch_up_max_runs=p.catch_up_max_runs,
            overlap=int(p.overlap),  # type: ignore[arg-type]
            pause_after_failures=p.pause_after_failures,
        ),
        paused=s.paused,
        pause_note=s.pause_note,
        runs=s.runs,
        consecutive_failures=s.consecutive_failures,
        create_time=to_timestamp(s.created_ms),
        update_time=to_timestamp(s.updated_ms),
        version=str(s.revision),
    )
    for name, value in (("start_time", spec.start_ms), ("end_time", spec.end_ms)):
        if value is not None:
            getattr(msg.spec, name).CopyFrom(to_timestamp(value))
    for name, value in (
        ("next_nominal_time", s.next_nominal_ms),
        ("next_fire_time", s.next_fire_ms),
        ("last_fire_time", s.last_fire_ms),
    ):
        if value is not None:
            getattr(msg, name).CopyFrom(to_timestamp(value))
    return msg


class Schedules:
    """The schedule operations, independent of gRPC (the CLI and tests use them through it).

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
    ) -> None:
        self.schedules = schedules
        self.store = store
        self.history = history
        self.clock = clock
        self.limits = limits
        self.queue = queue

    async def create(self, schedule: Schedule) -> Schedule:
        """Store a new schedule (or find the identical one stored before)."""
        await self.queue.prepare([schedule.action.queue])
        stored, _ = await self.schedules.create(schedule)
        return stored

    async def update(self, msg: schedules_pb2.Schedule, expected: int | None) -> Schedule:
        """Replace spec, action and policy; keep the run count, pause state and, when the spec
        is unchanged, the pending occurrence (so an update never skips or repeats one)."""
        now = self.clock.now_ms()
        fresh = new_schedule(msg, self.limits, self.store.shard_count, now)
        await self.queue.prepare([fresh.action.queue])

        def edit(current: Schedule) -> Schedule:
            updated = current.evolve(
                spec=fresh.spec, action=fresh.action, policy=fresh.policy,
                fingerprint=fresh.fingerprint, updated_ms=now, revision=current.revision + 1,
            )  # fmt: skip
            if fresh.spec == current.spec:
                return updated
            restart = first_occurrence(fresh.spec, current.schedule_id, now)
            return updated.evolve(buffered_nominal_ms=None).with_next(restart)

        return await self.change(fresh.namespace, fresh.schedule_id, edit, expected)

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
            return await self.schedules.replace(edit(current), current.version)

        return await self._retrying(namespace, schedule_id, expected_revision, write)

    async def delete(self, namespace: str, schedule_id: str, expected: int | None) -> None:
        async def write(current: Schedule) -> None:
            await self.schedules.delete(namespace, schedule_id, current.version)

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
            current = await self.schedules.get(namespace, schedule_id)
            _check_revision(current, expected_revision)
            try:
                return await write(current)
            except Conflict:
                continue
        raise Conflict(f"schedule {schedule_id!r} keeps changing; try again")

    async def trigger(self, namespace: str, schedule_id: str) -> Any:
        now = self.clock.now_ms()
        s = await self.schedules.get(namespace, schedule_id)
        await self.queue.prepare([s.action.queue])  # an older version stored it unprepared
        task, _ = await self.store.create(s.occurrence_task(now, now, now))
        await self.history.record_occurrences(
            [self._record(s, task.task_id, now, Outcome.TRIGGERED)]
        )
        return task

    async def backfill(
        self, namespace: str, schedule_id: str, start_ms: int, end_ms: int
    ) -> tuple[int, int]:
        """Run the occurrences with nominal instants in [start_ms, end_ms) now; those that
        already have a task (fired or backfilled before) are counted, not run again."""
        now = self.clock.now_ms()
        if end_ms > now:
            raise InvalidArgument("end_time", "backfill covers the past: must not be after now")
        if start_ms >= end_ms:
            raise InvalidArgument("start_time", "must be before end_time")
        s = await self.schedules.get(namespace, schedule_id)
        found = preview(s.spec, after_ms=start_ms - 1, schedule_id=s.schedule_id,
                        count=MAX_BACKFILL + 1, until_ms=end_ms - 1)  # fmt: skip
        if len(found) > MAX_BACKFILL:
            raise InvalidArgument("end_time", f"the range holds more than {MAX_BACKFILL} "
                                              "occurrences; backfill it in parts")  # fmt: skip
        tasks = [s.occurrence_task(o.nominal_ms, now, now) for o in found]
        await self.queue.prepare([s.action.queue])
        outcomes = await self.store.create_many(tasks)
        created = [t for t, r in zip(tasks, outcomes, strict=True) if isinstance(r, tuple) and r[1]]
        records = [self._record(s, t.task_id, t.scheduled_ms, Outcome.BACKFILLED) for t in created]
        await self.history.record_occurrences(records)
        return len(created), len(tasks) - len(created)

    async def occurrence_finished(self, task: Task) -> None:
        """Count consecutive dead-lettered occurrences; pause at the policy's threshold."""
        now = self.clock.now_ms()
        if task.state is TaskState.SUCCEEDED:
            edit = _succeeded(now)
        elif task.state is TaskState.DEAD_LETTERED:
            edit = _dead_lettered(task.task_id, now)
        else:
            return
        with contextlib.suppress(NotFound):
            await self.change(task.namespace, task.schedule_id, edit)

    def _record(
        self, s: Schedule, task_id: str, nominal_ms: int, outcome: Outcome
    ) -> OccurrenceRecord:
        now = self.clock.now_ms()
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


class ScheduleService(schedules_pb2_grpc.ScheduleServiceServicer):  # type: ignore[misc]
    def __init__(self, ops: Schedules) -> None:
        self._ops = ops
        self._clock = ops.clock
        self._limits = ops.limits

    @maps_errors
    async def CreateSchedule(
        self, request: schedules_pb2.CreateScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        now = self._clock.now_ms()
        shards = self._ops.store.shard_count
        schedule = new_schedule(request.schedule, self._limits, shards, now)
        return schedule_to_proto(await self._ops.create(schedule))

    @maps_errors
    async def GetSchedule(
        self, request: schedules_pb2.GetScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        ns, sid = self._key(request.namespace, request.schedule_id)
        return schedule_to_proto(await self._ops.schedules.get(ns, sid))

    @maps_errors
    async def ListSchedules(
        self, request: schedules_pb2.ListSchedulesRequest, context: Ctx
    ) -> schedules_pb2.ListSchedulesResponse:
        ns = validation.namespace(request.namespace)
        size = page_size(request.page_size)
        page = await self._ops.schedules.list(ns, size, request.page_token)
        return schedules_pb2.ListSchedulesResponse(
            schedules=[schedule_to_proto(s) for s in page.items], next_page_token=page.next_token
        )

    @maps_errors
    async def UpdateSchedule(
        self, request: schedules_pb2.UpdateScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        expected = validation.expected_version(request.expected_version)
        return schedule_to_proto(await self._ops.update(request.schedule, expected))

    @maps_errors
    async def DeleteSchedule(
        self, request: schedules_pb2.DeleteScheduleRequest, context: Ctx
    ) -> schedules_pb2.DeleteScheduleResponse:
        ns, sid = self._key(request.namespace, request.schedule_id)
        await self._ops.delete(ns, sid, validation.expected_version(request.expected_version))
        return schedules_pb2.DeleteScheduleResponse()

    @maps_errors
    async def PauseSchedule(
        self, request: schedules_pb2.PauseScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        ns, sid = self._key(request.namespace, request.schedule_id)
        if len(request.note) > 1_000:
            raise InvalidArgument("note", "longer than 1000 characters")
        edit = _pause(request.note, self._clock.now_ms())
        return schedule_to_proto(await self._ops.change(ns, sid, edit))

    @maps_errors
    async def ResumeSchedule(
        self, request: schedules_pb2.ResumeScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        ns, sid = self._key(request.namespace, request.schedule_id)
        return schedule_to_proto(await self._ops.change(ns, sid, _resume(self._clock.now_ms())))

    @maps_errors
    async def TriggerSchedule(
        self, request: schedules_pb2.TriggerScheduleRequest, context: Ctx
    ) -> schedules_pb2.TriggerScheduleResponse:
        ns, sid = self._key(request.namespace, request.schedule_id)
        task = await self._ops.trigger(ns, sid)
        return schedules_pb2.TriggerScheduleResponse(task=task_to_proto(task))

    @maps_errors
    async def BackfillSchedule(
        self, request: schedules_pb2.BackfillScheduleRequest, context: Ctx
    ) -> schedules_pb2.BackfillScheduleResponse:
        ns, sid = self._key(request.namespace, request.schedule_id)
        start = validation.optional_timestamp_ms(request, "start_time")
        end = validation.optional_timestamp_ms(request, "end_time")
        if start is None or end is None:
            raise InvalidArgument("start_time" if start is None else "end_time", "required")
        created, existing = await self._ops.backfill(ns, sid, start, end)
        return schedules_pb2.BackfillScheduleResponse(created=created, existing=existing)

    @maps_errors
    async def PreviewSchedule(
        self, request: schedules_pb2.PreviewScheduleRequest, context: Ctx
    ) -> schedules_pb2.PreviewScheduleResponse:
        now = self._clock.now_ms()
        after = validation.optional_timestamp_ms(request, "after_time")
        until = validation.optional_timestamp_ms(request, "until_time")
        count = request.count or _DEFAULT_PREVIEW
        if not 0 < count <= self._limits.max_preview:
            raise InvalidArgument("count", f"must be 1..{self._limits.max_preview}, got {count}")
        if request.WhichOneof("target") == "schedule":
            ns, sid = self._key(request.schedule.namespace, request.schedule.schedule_id)
            s = await self._ops.schedules.get(ns, sid)
            spec = s.spec
            if after is None:
                # From the pending occurrence on, even if it is overdue right now.
                after = now if s.next_nominal_ms is None else min(now, s.next_nominal_ms - 1)
            if spec.max_runs is not None:
                count = min(count, max(0, spec.max_runs - s.runs))
            if s.next_nominal_ms is None:
                count = 0
        else:
            spec, sid = schedule_spec(request.spec, self._limits, now), ""
            after = now if after is None else after
        found = preview(spec, after_ms=after, schedule_id=sid, count=count, until_ms=until)
        return schedules_pb2.PreviewScheduleResponse(
            occurrences=[
                schedules_pb2.PreviewedOccurrence(
                    nominal_time=to_timestamp(o.nominal_ms),
                    fire_time=to_timestamp(o.fire_ms),
                    local_time=format_local(o.fire_ms, spec.timezone),
                )
                for o in found
            ]
        )

    def _key(self, namespace: str, schedule_id: str) -> tuple[str, str]:
        if not schedule_id:
            raise InvalidArgument("schedule_id", "must not be empty")
        return validation.namespace(namespace), schedule_id
