"""The schedule API (``tikk.v1.ScheduleService``): specs in, occurrences out.

Served so far: ``PreviewSchedule`` for a spec not yet created, so a client can check an
expression and see its fire times (local and UTC) before committing to it. The other methods
answer UNIMPLEMENTED until the schedule store exists.
"""

from __future__ import annotations

from typing import Any

import grpc

from server import validation
from server.status import maps_errors
from tikk.clock import Clock
from tikk.errors import FailedPrecondition, InvalidArgument
from tikk.schedule_spec import ScheduleSpec, format_local, preview, validate
from tikk.settings import TEN_YEARS_MS, Limits
from tikk.timestamps import to_timestamp
from tikk.v1 import schedules_pb2, schedules_pb2_grpc

Ctx = grpc.aio.ServicerContext[Any, Any]
_DEFAULT_PREVIEW = 10
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


class ScheduleService(schedules_pb2_grpc.ScheduleServiceServicer):  # type: ignore[misc]
    def __init__(self, clock: Clock, limits: Limits) -> None:
        self._clock = clock
        self._limits = limits

    @maps_errors
    async def PreviewSchedule(
        self, request: schedules_pb2.PreviewScheduleRequest, context: Ctx
    ) -> schedules_pb2.PreviewScheduleResponse:
        now = self._clock.now_ms()
        if request.WhichOneof("target") != "spec":
            raise FailedPrecondition("preview of a stored schedule is not available yet")
        spec = schedule_spec(request.spec, self._limits, now)
        after = validation.optional_timestamp_ms(request, "after_time")
        after = now if after is None else after
        until = validation.optional_timestamp_ms(request, "until_time")
        count = request.count or _DEFAULT_PREVIEW
        if not 0 < count <= self._limits.max_preview:
            raise InvalidArgument("count", f"must be 1..{self._limits.max_preview}, got {count}")
        found = preview(spec, after_ms=after, schedule_id="", count=count, until_ms=until)
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
