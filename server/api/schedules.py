"""``tikk.v1.ScheduleService``: schedules from and to protobuf, over ``server.ops.schedules``.

``UpdateSchedule`` and ``DeleteSchedule`` may take the version the client read (the schedule's
``version``); a stale one is ABORTED and nothing changes.
"""

from __future__ import annotations

from server.api import validation
from server.api.messages import retry_to_proto, task_to_proto
from server.api.status import Ctx
from server.ops.schedules import ScheduleOps, first_occurrence
from tikk.buckets import shard_of
from tikk.clock import Clock
from tikk.errors import InvalidArgument
from tikk.model import fingerprint
from tikk.schedules.model import Schedule, SchedulePolicy
from tikk.schedules.spec import Occurrence, ScheduleSpec, format_local, preview, validate
from tikk.settings import TEN_YEARS_MS, Limits, Settings
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import schedules_pb2, schedules_pb2_grpc

_DEFAULT_PREVIEW = 10
_MAX_NOTE = 1_000
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
        interval_ms=_interval_ms(msg, limits),
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


def _interval_ms(msg: schedules_pb2.ScheduleSpec, limits: Limits) -> int:
    """The interval in ms. One set but shorter than a millisecond (``1 ns``) is refused here,
    naming the interval: in whole ms it is 0, which would read as no interval at all."""
    ms = validation.duration_ms(msg.interval, "spec.interval", TEN_YEARS_MS)
    if ms == 0 and msg.interval.nanos:
        raise InvalidArgument(
            "spec.interval", f"{msg.interval.nanos} ns is below the minimum interval of "
            f"{limits.min_schedule_interval_ms:,} ms",
        )  # fmt: skip
    return ms


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
    a = s.action
    msg = schedules_pb2.Schedule(
        namespace=s.namespace,
        id=s.schedule_id,
        spec=_spec_to_proto(s.spec),
        queue=a.queue,
        handler=a.handler,
        payload=a.payload,
        labels=dict(a.labels),
        retry_policy=retry_to_proto(a.retry),
        policy=_policy_to_proto(s.policy),
        paused=s.paused,
        pause_note=s.pause_note,
        runs=s.runs,
        consecutive_failures=s.consecutive_failures,
        create_time=to_timestamp(s.created_ms),
        update_time=to_timestamp(s.updated_ms),
        version=str(s.revision),
    )
    for name, value in (
        ("next_nominal_time", s.next_nominal_ms),
        ("next_fire_time", s.next_fire_ms),
        ("last_fire_time", s.last_fire_ms),
    ):
        if value is not None:
            getattr(msg, name).CopyFrom(to_timestamp(value))
    return msg


def _spec_to_proto(spec: ScheduleSpec) -> schedules_pb2.ScheduleSpec:
    msg = schedules_pb2.ScheduleSpec(
        cron=spec.cron,
        interval=to_duration(spec.interval_ms),
        phase=to_duration(spec.phase_ms),
        timezone=spec.timezone,
        max_runs=spec.max_runs or 0,
        jitter=to_duration(spec.jitter_ms),
    )
    for name, value in (("start_time", spec.start_ms), ("end_time", spec.end_ms)):
        if value is not None:
            getattr(msg, name).CopyFrom(to_timestamp(value))
    return msg


def _policy_to_proto(p: SchedulePolicy) -> schedules_pb2.SchedulePolicy:
    return schedules_pb2.SchedulePolicy(
        catch_up_window=to_duration(p.catch_up_window_ms),
        catch_up=int(p.catch_up),  # type: ignore[arg-type]
        catch_up_max_runs=p.catch_up_max_runs,
        overlap=int(p.overlap),  # type: ignore[arg-type]
        pause_after_failures=p.pause_after_failures,
    )


def _preview_to_proto(
    found: list[Occurrence], timezone: str
) -> schedules_pb2.PreviewScheduleResponse:
    return schedules_pb2.PreviewScheduleResponse(
        occurrences=[
            schedules_pb2.PreviewedOccurrence(
                nominal_time=to_timestamp(o.nominal_ms),
                fire_time=to_timestamp(o.fire_ms),
                local_time=format_local(o.fire_ms, timezone),
            )
            for o in found
        ]
    )


class ScheduleService(schedules_pb2_grpc.ScheduleServiceServicer):  # type: ignore[misc]
    def __init__(self, ops: ScheduleOps, settings: Settings, clock: Clock) -> None:
        self._ops = ops
        self._clock = clock
        self._limits = settings.limits
        self._shards = settings.shard_count

    def _new_schedule(self, msg: schedules_pb2.Schedule) -> Schedule:
        return new_schedule(msg, self._limits, self._shards, self._clock.now_ms())

    async def CreateSchedule(
        self, request: schedules_pb2.CreateScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        return schedule_to_proto(await self._ops.create(self._new_schedule(request.schedule)))

    async def GetSchedule(
        self, request: schedules_pb2.GetScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        ns, sid = self._key(request.namespace, request.schedule_id)
        return schedule_to_proto(await self._ops.get(ns, sid))

    async def ListSchedules(
        self, request: schedules_pb2.ListSchedulesRequest, context: Ctx
    ) -> schedules_pb2.ListSchedulesResponse:
        ns = validation.namespace(request.namespace)
        size = validation.listing_page_size(request.page_size, self._limits)
        page = await self._ops.list_schedules(ns, size, request.page_token)
        return schedules_pb2.ListSchedulesResponse(
            schedules=[schedule_to_proto(s) for s in page.items], next_page_token=page.next_token
        )

    async def UpdateSchedule(
        self, request: schedules_pb2.UpdateScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        expected = validation.expected_version(request.expected_version)
        fresh = self._new_schedule(request.schedule)
        updated = await self._ops.update(
            fresh.namespace, fresh.schedule_id, spec=fresh.spec, action=fresh.action,
            policy=fresh.policy, expected_revision=expected,
        )  # fmt: skip
        return schedule_to_proto(updated)

    async def DeleteSchedule(
        self, request: schedules_pb2.DeleteScheduleRequest, context: Ctx
    ) -> schedules_pb2.DeleteScheduleResponse:
        ns, sid = self._key(request.namespace, request.schedule_id)
        await self._ops.delete(ns, sid, validation.expected_version(request.expected_version))
        return schedules_pb2.DeleteScheduleResponse()

    async def PauseSchedule(
        self, request: schedules_pb2.PauseScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        ns, sid = self._key(request.namespace, request.schedule_id)
        if len(request.note) > _MAX_NOTE:
            raise InvalidArgument("note", f"longer than {_MAX_NOTE} characters")
        return schedule_to_proto(await self._ops.pause(ns, sid, request.note))

    async def ResumeSchedule(
        self, request: schedules_pb2.ResumeScheduleRequest, context: Ctx
    ) -> schedules_pb2.Schedule:
        ns, sid = self._key(request.namespace, request.schedule_id)
        return schedule_to_proto(await self._ops.resume(ns, sid))

    async def TriggerSchedule(
        self, request: schedules_pb2.TriggerScheduleRequest, context: Ctx
    ) -> schedules_pb2.TriggerScheduleResponse:
        ns, sid = self._key(request.namespace, request.schedule_id)
        task = await self._ops.trigger(ns, sid)
        return schedules_pb2.TriggerScheduleResponse(task=task_to_proto(task))

    async def BackfillSchedule(
        self, request: schedules_pb2.BackfillScheduleRequest, context: Ctx
    ) -> schedules_pb2.BackfillScheduleResponse:
        ns, sid = self._key(request.namespace, request.schedule_id)
        start = validation.optional_timestamp_ms(request, "start_time")
        end = validation.optional_timestamp_ms(request, "end_time")
        if start is None or end is None:
            raise InvalidArgument("start_time" if start is None else "end_time", "required")
        validation.backfill_span(start, end, self._limits)
        if request.dry_run:
            fresh, existing = await self._ops.backfill_plan(ns, sid, start, end)
            zone = (await self._ops.get(ns, sid)).spec.timezone
            listed = _preview_to_proto(fresh, zone).occurrences
            return schedules_pb2.BackfillScheduleResponse(
                created=len(fresh), existing=existing, occurrences=listed
            )
        created, existing = await self._ops.backfill(ns, sid, start, end)
        return schedules_pb2.BackfillScheduleResponse(created=created, existing=existing)

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
            spec, found = await self._ops.upcoming(
                ns, sid, after_ms=after, count=count, until_ms=until
            )
        else:
            spec = schedule_spec(request.spec, self._limits, now)
            after = now if after is None else after
            found = preview(spec, after_ms=after, schedule_id="", count=count, until_ms=until)
        return _preview_to_proto(found, spec.timezone)

    def _key(self, namespace: str, schedule_id: str) -> tuple[str, str]:
        """The schedule a request names. Its id is held to a lookup's rule (``task_id``): a
        schedule stored before the name rule can still be read, paused and deleted."""
        sid = validation.task_id(schedule_id, self._limits, "schedule_id")
        return validation.namespace(namespace), sid
