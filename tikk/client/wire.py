"""The client's Python values as tikk.v1 messages: the only place the client builds protobuf
from them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tikk.client.specs import (
    Recurrence,
    RetryOptions,
    ScheduleDefinition,
    TaskSelection,
    TaskSpec,
    require_aware,
)
from tikk.payload_codec import encode_payload
from tikk.v1 import bulk_pb2, schedules_pb2, tasks_pb2


def timestamp(value: datetime, name: str = "time") -> Timestamp:
    require_aware(value, name)
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts


def duration(value: timedelta) -> Duration:
    d = Duration()
    d.FromTimedelta(value)
    return d


def payload_bytes(payload: object) -> bytes:
    """What a task carries: bytes as given, text as UTF-8, a dataclass, a pydantic model or
    plain data as JSON, as a typed handler decodes it (``tikk.payload_codec``)."""
    return encode_payload(payload)


def enum_name(enum: Any, prefix: str, value: str | int | None) -> str:
    """The full name of a protobuf enum value given as its number or short name
    (``"scheduled"`` for ``TASK_STATE_SCHEDULED``); ``None`` is the zero value, which the API
    reads as "any" or "the default"."""
    if value is None:
        value = 0
    if isinstance(value, int):
        name: str = enum.Name(value)
        return name
    name = value.upper()
    name = name if name.startswith(prefix) else prefix + name
    names = list(enum.keys())
    if name not in names:
        known = ", ".join(n.removeprefix(prefix).lower() for n in names[1:])
        what = prefix.lower().rstrip("_").replace("_", " ")
        raise ValueError(f"unknown {what} {value!r} ({known})")
    return name


def retry_message(r: RetryOptions) -> tasks_pb2.RetryPolicy:
    msg = tasks_pb2.RetryPolicy(
        max_attempts=r.max_attempts, multiplier=r.multiplier, jitter=r.jitter
    )
    if r.initial_backoff is not None:
        msg.initial_backoff.CopyFrom(duration(r.initial_backoff))
    if r.max_backoff is not None:
        msg.max_backoff.CopyFrom(duration(r.max_backoff))
    return msg


def task_request(
    task: TaskSpec | tasks_pb2.CreateTaskRequest, namespace: str
) -> tasks_pb2.CreateTaskRequest:
    """The create request of ``task``; a request given as one keeps its own namespace."""
    if isinstance(task, tasks_pb2.CreateTaskRequest):
        if task.namespace or not namespace:
            return task
        req = tasks_pb2.CreateTaskRequest()
        req.CopyFrom(task)
        req.namespace = namespace
        return req
    return _spec_request(task, namespace)


def _spec_request(task: TaskSpec, namespace: str) -> tasks_pb2.CreateTaskRequest:
    req = tasks_pb2.CreateTaskRequest(
        namespace=namespace, task_id=task.task_id, queue=task.queue, handler=task.handler,
        payload=payload_bytes(task.payload), labels=dict(task.labels),
    )  # fmt: skip
    if task.run_at is not None:
        req.run_at.CopyFrom(timestamp(task.run_at, "run_at"))
    elif task.delay is not None:
        req.delay.CopyFrom(duration(task.delay))
    if task.retry is not None:
        req.retry_policy.CopyFrom(retry_message(task.retry))
    if task.start_timeout is not None:
        req.start_timeout.CopyFrom(duration(task.start_timeout))
    if task.execution_timeout is not None:
        req.execution_timeout.CopyFrom(duration(task.execution_timeout))
    return req


def spec_message(r: Recurrence) -> schedules_pb2.ScheduleSpec:
    spec = schedules_pb2.ScheduleSpec(cron=r.cron, timezone=r.timezone, max_runs=r.max_runs)
    _set_durations(spec, interval=r.every, phase=r.phase, jitter=r.jitter)
    if r.start is not None:
        spec.start_time.CopyFrom(timestamp(r.start, "start"))
    if r.end is not None:
        spec.end_time.CopyFrom(timestamp(r.end, "end"))
    return spec


def schedule_message(d: ScheduleDefinition, namespace: str) -> schedules_pb2.Schedule:
    msg = schedules_pb2.Schedule(
        namespace=namespace, id=d.schedule_id, spec=spec_message(d.recurrence), queue=d.queue,
        handler=d.handler, payload=payload_bytes(d.payload), labels=dict(d.labels),
        policy=_policy(d),
    )  # fmt: skip
    if d.retry is not None:
        msg.retry_policy.CopyFrom(retry_message(d.retry))
    return msg


def _policy(d: ScheduleDefinition) -> schedules_pb2.SchedulePolicy:
    policy = schedules_pb2.SchedulePolicy(
        catch_up=enum_name(schedules_pb2.CatchUpPolicy, "CATCH_UP_POLICY_", d.catch_up),
        overlap=enum_name(schedules_pb2.OverlapPolicy, "OVERLAP_POLICY_", d.overlap),
        catch_up_max_runs=d.catch_up_max_runs,
        pause_after_failures=d.pause_after_failures,
    )
    _set_durations(policy, catch_up_window=d.catch_up_window)
    return policy


def _set_durations(msg: Any, **spans: timedelta | None) -> None:
    for name, span in spans.items():
        if span is not None:
            getattr(msg, name).CopyFrom(duration(span))


def time_range(msg: Any, start: datetime | None, end: datetime | None) -> Any:
    """``msg`` with its optional ``start_time`` and ``end_time`` set."""
    for name, value in (("start", start), ("end", end)):
        if value is not None:
            getattr(msg, f"{name}_time").CopyFrom(timestamp(value, name))
    return msg


def selection_message(s: TaskSelection, namespace: str) -> bulk_pb2.TaskFilter:
    msg = bulk_pb2.TaskFilter(
        namespace=namespace, queue=s.queue, label_selector=s.labels, error_type=s.error_type,
        state=enum_name(tasks_pb2.TaskState, "TASK_STATE_", s.state),
    )  # fmt: skip
    times = {"due_after": s.due_after, "due_before": s.due_before,
             "changed_after": s.failed_after, "changed_before": s.failed_before}  # fmt: skip
    for name, value in times.items():
        if value is not None:
            getattr(msg, name).CopyFrom(timestamp(value, name))
    return msg
