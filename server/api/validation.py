"""Request validation: protobuf in, domain objects out, or ``InvalidArgument`` naming the field.

Nothing here fixes input silently: a value outside the limits is refused, never trimmed.

Queue names of new tasks and schedules (``new_queue``) may not contain ``.``: each queue is a
Kafka topic ``<prefix><queue>`` with a dead-letter topic ``<prefix><queue>.dlq``, and Kafka
refuses a topic whose name equals another's once ``.`` and ``_`` are taken as one character.
Without ``.``, and without the ending ``_dlq``, no two queues and no queue and dead-letter
topic can collide. Filters of list requests (``queue``) accept the older, wider form, so
tasks and runs stored under such names can still be found.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TypeVar

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from tikk.buckets import shard_of
from tikk.errors import InvalidArgument
from tikk.model import DEFAULT_NAMESPACE, RetryPolicy, Task, TaskState, fingerprint
from tikk.paging import page_size
from tikk.queue_contract import (
    FOLDED_DEAD_LETTER_SUFFIX,
    NEW_QUEUE_NAME,
    QUEUE_NAME,
    is_dead_letter_queue,
)
from tikk.schedules.model import (
    CatchUp,
    Outcome,
    Overlap,
    ScheduleAction,
    SchedulePolicy,
    reserved_task_id,
)
from tikk.settings import TEN_YEARS_MS, Limits
from tikk.text_rules import check_name, quoted
from tikk.v1 import history_pb2, schedules_pb2, tasks_pb2

_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
# 0001-01-01 .. 9999-12-31, the range google.protobuf.Timestamp allows.
_MIN_SECONDS, _MAX_SECONDS = -62135596800, 253402300799


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def namespace(value: str, field: str = "namespace") -> str:
    if not value:
        return DEFAULT_NAMESPACE
    if not _NAMESPACE.fullmatch(value):
        raise InvalidArgument(field, "must be 1-64 of A-Z a-z 0-9 . _ - starting alphanumeric")
    return value


def task_id(value: str, limits: Limits, field: str = "task_id") -> str:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > limits.max_id_length:
        raise InvalidArgument(field, f"longer than {limits.max_id_length} characters")
    if _has_control(value) or value != value.strip():
        raise InvalidArgument(field, "must not contain control characters or edge whitespace")
    return value


def new_task_id(value: str, limits: Limits) -> str:
    """A client-chosen id for a new task: ids of schedule occurrences are not for clients.
    Unlike a lookup's id, a new one must be a name (``tikk.text_rules``): ids stored before
    that rule can still be read, cancelled and re-driven."""
    value = check_name(task_id(value, limits), "task_id")
    if reserved_task_id(value):
        raise InvalidArgument("task_id", "ids ending in @<digits> or @schedule are for schedules")
    return value


def queue(value: str, limits: Limits, field: str = "queue") -> str:
    """A queue name as tasks may have been stored under (older versions allowed ``.``): for
    filters of list requests."""
    _queue_size(value, limits, field)
    if not QUEUE_NAME.fullmatch(value):
        raise InvalidArgument(field, "must be A-Z a-z 0-9 . _ - starting alphanumeric")
    if is_dead_letter_queue(value):
        raise InvalidArgument(field, "names ending in .dlq are reserved for dead-letter streams")
    return value


def new_queue(value: str, limits: Limits, field: str = "queue") -> str:
    """The queue of a new task or schedule: a name that collides with no other queue's topic
    nor dead-letter topic on Kafka (see the module docstring)."""
    _queue_size(value, limits, field)
    if not NEW_QUEUE_NAME.fullmatch(value):
        raise InvalidArgument(
            field,
            "may contain only A-Z a-z 0-9 _ - and must start with a letter or digit (a '.' "
            "would collide with '_' in Kafka topic names and with dead-letter topics)",
        )
    if value.endswith(FOLDED_DEAD_LETTER_SUFFIX):
        raise InvalidArgument(
            field,
            f"must not end in {FOLDED_DEAD_LETTER_SUFFIX} (Kafka would take it for the "
            "dead-letter topic <queue>.dlq of another queue)",
        )
    return value


def _queue_size(value: str, limits: Limits, field: str) -> None:
    if not value:
        raise InvalidArgument(field, "must not be empty")
    if len(value) > limits.max_queue_length:
        raise InvalidArgument(field, f"longer than {limits.max_queue_length} characters")


def _handler(value: str, limits: Limits) -> str:
    if not value:
        raise InvalidArgument("handler", "must not be empty")
    if len(value) > limits.max_handler_length:
        raise InvalidArgument("handler", f"longer than {limits.max_handler_length} characters")
    return check_name(value, "handler")


def _labels(labels: dict[str, str], limits: Limits) -> dict[str, str]:
    if len(labels) > limits.max_labels:
        raise InvalidArgument("labels", f"more than {limits.max_labels} labels")
    for key, value in labels.items():
        field = f"labels[{quoted(key)}]"
        if len(key) > limits.max_label_key_length or not _LABEL_KEY.fullmatch(key):
            raise InvalidArgument(
                field, f"key must be 1-{limits.max_label_key_length} of A-Z a-z 0-9 . _ / - "
                "starting alphanumeric",
            )  # fmt: skip
        if len(value) > limits.max_label_value_length:
            raise InvalidArgument(
                field, f"value longer than {limits.max_label_value_length} characters"
            )
        check_name(value, field)
    return dict(sorted(labels.items()))


def timestamp_ms(ts: Timestamp, field: str) -> int:
    if not (_MIN_SECONDS <= ts.seconds <= _MAX_SECONDS) or not (0 <= ts.nanos < 1_000_000_000):
        raise InvalidArgument(field, "not a valid timestamp")
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def optional_timestamp_ms(msg: Message, name: str, field: str = "") -> int | None:
    """``msg.<name>`` in ms if set, else ``None``; errors name ``field`` (default ``name``)."""
    if not msg.HasField(name):
        return None
    return timestamp_ms(getattr(msg, name), field or name)


def duration_ms(d: Duration, field: str, max_ms: int) -> int:
    if not (0 <= d.nanos < 1_000_000_000 and d.seconds >= 0):
        raise InvalidArgument(field, "must be a non-negative duration")
    ms = d.seconds * 1000 + d.nanos // 1_000_000
    if ms > max_ms:
        raise InvalidArgument(field, f"longer than {max_ms // 86_400_000} days")
    return ms


def retry_policy(msg: tasks_pb2.RetryPolicy, limits: Limits) -> RetryPolicy:
    """Unset fields take the defaults; set ones must make sense together."""
    d = limits.default_retry
    f = "retry_policy."
    attempts = msg.max_attempts if msg.HasField("max_attempts") else d.max_attempts
    if not 1 <= attempts <= limits.max_attempts:
        raise InvalidArgument(f + "max_attempts", f"must be between 1 and {limits.max_attempts}")
    cap = limits.max_backoff_ms
    initial = (
        duration_ms(msg.initial_backoff, f + "initial_backoff", cap)
        if msg.HasField("initial_backoff")
        else d.initial_backoff_ms
    )
    maximum = (
        duration_ms(msg.max_backoff, f + "max_backoff", cap)
        if msg.HasField("max_backoff")
        else max(d.max_backoff_ms, initial)
    )
    if initial > maximum:
        raise InvalidArgument(f + "initial_backoff", "must not exceed max_backoff")
    multiplier = msg.multiplier if msg.HasField("multiplier") else d.multiplier
    if not 1.0 <= multiplier <= 100.0:
        raise InvalidArgument(f + "multiplier", "must be between 1.0 and 100.0")
    jitter = msg.jitter if msg.HasField("jitter") else d.jitter
    if not 0.0 <= jitter <= 1.0:
        raise InvalidArgument(f + "jitter", "must be between 0.0 and 1.0")
    return RetryPolicy(attempts, initial, multiplier, maximum, jitter)


def requested_time(
    req: tasks_pb2.CreateTaskRequest | tasks_pb2.RescheduleTaskRequest, limits: Limits, now_ms: int
) -> int:
    """The instant of a request's ``when`` (``run_at`` or ``delay``), now if neither."""
    horizon = limits.max_schedule_ahead_ms
    match req.WhichOneof("when"):
        case "run_at":
            at = timestamp_ms(req.run_at, "run_at")
            if at - now_ms > horizon:
                raise InvalidArgument("run_at", "more than 10 years ahead")
            return at
        case "delay":
            return now_ms + duration_ms(req.delay, "delay", horizon)
        case _:
            return now_ms


def create_task(
    req: tasks_pb2.CreateTaskRequest,
    limits: Limits,
    shard_count: int,
    now_ms: int,
    trace_context: Mapping[str, str] | None = None,
) -> Task:
    """A new SCHEDULED task from a create request (``InvalidArgument`` on bad input).

    A run time in the past is accepted and runs now: the due time is never before the
    moment the task was accepted, so no dispatcher has already passed it. ``trace_context``
    (of the creating call) is kept but not fingerprinted: a retried create from another
    trace is the same task.
    """
    ns = namespace(req.namespace)
    tid = new_task_id(req.task_id, limits) if req.task_id else _fresh_id(now_ms)
    q = new_queue(req.queue, limits)
    handler = _handler(req.handler, limits)
    if len(req.payload) > limits.max_payload_bytes:
        raise InvalidArgument("payload", f"larger than {limits.max_payload_bytes} bytes")
    labels = _labels(dict(req.labels), limits)
    policy = retry_policy(req.retry_policy, limits) if req.HasField("retry_policy") else None
    requested = requested_time(req, limits, now_ms)
    when = req.WhichOneof("when")
    when_spec = (when, requested if when == "run_at" else req.delay.ToMilliseconds())
    start_timeout, run_timeout = _start_timeout(req, limits), _execution_timeout(req)
    # Only when set, so the fingerprints of tasks without them stay what they were.
    extra = tuple((k, v) for k, v in (("start_timeout", start_timeout),
                                      ("execution_timeout", run_timeout)) if v)  # fmt: skip
    # Only a client-chosen id can be sent again, so only its create needs a fingerprint.
    parts = (ns, tid, q, handler, req.payload, labels, policy, when_spec, *extra)
    digest = fingerprint(*parts) if req.task_id else ""
    return Task(
        namespace=ns, task_id=tid, queue=q, handler=handler, payload=req.payload, labels=labels,
        retry=policy or limits.default_retry, state=TaskState.SCHEDULED, attempt=1,
        due_ms=max(requested, now_ms), scheduled_ms=requested, created_ms=now_ms,
        updated_ms=now_ms, shard=shard_of(ns, tid, shard_count), fingerprint=digest,
        trace_context=trace_context or {}, start_timeout_ms=start_timeout,
        execution_timeout_ms=run_timeout,
    )  # fmt: skip


def _fresh_id(now_ms: int) -> str:
    """A server-assigned task id: 32 hex digits, the creation millisecond then 80 random bits
    (as a version 7 UUID orders them). Ids made one after another sort together, so an
    index keyed by them grows at its end instead of touching a random page per task."""
    return f"{now_ms & 0xFFFFFFFFFFFF:012x}{os.urandom(10).hex()}"


def _start_timeout(req: tasks_pb2.CreateTaskRequest, limits: Limits) -> int:
    """The schedule-to-start timeout in ms (0: none); at least a second, at most a year."""
    if not req.HasField("start_timeout"):
        return 0
    ms = duration_ms(req.start_timeout, "start_timeout", limits.max_backoff_ms)
    if ms < 1_000:
        raise InvalidArgument("start_timeout", "must be at least 1 s")
    return ms


# The longest execution timeout a task may ask for: a run longer than a day is a job for
# something else, and a worker holds its message (and its lease) that long.
MAX_EXECUTION_TIMEOUT_MS = 86_400_000


def _execution_timeout(req: tasks_pb2.CreateTaskRequest) -> int:
    """How long one run of the task may take, in ms (0: the handler's own); 1 s to a day."""
    if not req.HasField("execution_timeout"):
        return 0
    ms = duration_ms(req.execution_timeout, "execution_timeout", MAX_EXECUTION_TIMEOUT_MS)
    if ms < 1_000:
        raise InvalidArgument("execution_timeout", "must be at least 1 s")
    return ms


def schedule_id(value: str, limits: Limits) -> str:
    value = check_name(task_id(value, limits, "schedule.id"), "schedule.id")
    if "@" in value:
        raise InvalidArgument("schedule.id", "must not contain @ (it separates occurrence ids)")
    return value


def schedule_action(msg: schedules_pb2.Schedule, limits: Limits) -> ScheduleAction:
    """What each occurrence of the schedule runs: the same rules as a task's fields."""
    if len(msg.payload) > limits.max_payload_bytes:
        raise InvalidArgument("schedule.payload", f"larger than {limits.max_payload_bytes} bytes")
    policy = (
        retry_policy(msg.retry_policy, limits)
        if msg.HasField("retry_policy")
        else limits.default_retry
    )
    return ScheduleAction(
        queue=new_queue(msg.queue, limits, "schedule.queue"),
        handler=_handler(msg.handler, limits),
        payload=msg.payload,
        labels=_labels(dict(msg.labels), limits),
        retry=policy,
    )


_MAX_CATCH_UP_RUNS = 1_000
_MAX_PAUSE_AFTER = 1_000


def schedule_policy(msg: schedules_pb2.SchedulePolicy) -> SchedulePolicy:
    """Unset fields take the defaults of ``SchedulePolicy``."""
    d = SchedulePolicy()
    f = "schedule.policy."
    window = (
        duration_ms(msg.catch_up_window, f + "catch_up_window", TEN_YEARS_MS)
        if msg.HasField("catch_up_window")
        else d.catch_up_window_ms
    )
    runs = msg.catch_up_max_runs or d.catch_up_max_runs
    if not 0 < runs <= _MAX_CATCH_UP_RUNS:
        raise InvalidArgument(f + "catch_up_max_runs", f"must be 1..{_MAX_CATCH_UP_RUNS}")
    if not 0 <= msg.pause_after_failures <= _MAX_PAUSE_AFTER:
        raise InvalidArgument(f + "pause_after_failures", f"must be 0..{_MAX_PAUSE_AFTER}")
    return SchedulePolicy(
        catch_up_window_ms=window,
        catch_up=_enum(CatchUp, msg.catch_up, d.catch_up, f + "catch_up"),
        catch_up_max_runs=runs,
        overlap=_enum(Overlap, msg.overlap, d.overlap, f + "overlap"),
        pause_after_failures=msg.pause_after_failures,
    )


E = TypeVar("E", CatchUp, Overlap)


def _enum(kind: type[E], value: int, default: E, field: str) -> E:
    if value == 0:
        return default
    try:
        return kind(value)
    except ValueError:
        raise InvalidArgument(field, f"unknown value {value}") from None


def expected_version(value: str, field: str = "expected_version") -> int | None:
    """A schedule version a client read (its conflict token); empty means no check."""
    if not value:
        return None
    try:
        parsed = int(value)
    except ValueError:
        raise InvalidArgument(field, f"not a version of this schedule: {quoted(value)}") from None
    if parsed < 1:
        raise InvalidArgument(field, f"not a version of this schedule: {quoted(value)}")
    return parsed


def task_state(value: int) -> TaskState | None:
    if value == tasks_pb2.TASK_STATE_UNSPECIFIED:
        return None
    try:
        return TaskState(value)
    except ValueError:
        raise InvalidArgument("state", f"unknown task state {value}") from None


def occurrence_outcome(value: int) -> Outcome | None:
    if value == 0:
        return None
    try:
        return Outcome(value)
    except ValueError:
        raise InvalidArgument("outcome", f"unknown occurrence outcome {value}") from None


def run_status(value: int) -> int | None:
    if value == history_pb2.RUN_STATUS_UNSPECIFIED:
        return None
    if value not in history_pb2.RunStatus.values():
        raise InvalidArgument("status", f"unknown run status {value}")
    return value


def listing_page_size(requested: int, limits: Limits) -> int:
    """A listing's page size: 0 asks the default; over the maximum is refused, not trimmed."""
    return page_size(requested, limits.max_page_size, limits.default_page_size)


def time_span(
    request: Message, now_ms: int, default_span_ms: int, limits: Limits
) -> tuple[int, int]:
    """[start_time, end_time) of a history query. Without an end it runs to now; without a
    start it covers ``default_span_ms`` (at most the limit) back from its end. A longer span
    than ``max_history_span_ms`` is refused: page through a longer period call by call."""
    end = optional_timestamp_ms(request, "end_time")
    end = now_ms + 1 if end is None else end
    start = optional_timestamp_ms(request, "start_time")
    if start is None:
        start = end - min(default_span_ms, limits.max_history_span_ms)
    if start >= end:
        raise InvalidArgument("start_time", "must be before end_time")
    if end - start > limits.max_history_span_ms:
        raise InvalidArgument(
            "start_time",
            f"the time range spans more than the limit of {_days(limits.max_history_span_ms)} "
            "per call (max_history_span): query a shorter range, one after another",
        )
    return start, end


def backfill_span(start_ms: int, end_ms: int, limits: Limits) -> None:
    """Refuse a backfill range longer than ``max_backfill_span_ms``."""
    if end_ms - start_ms > limits.max_backfill_span_ms:
        raise InvalidArgument(
            "start_time",
            f"a backfill spans at most {_days(limits.max_backfill_span_ms)} "
            "(max_backfill_span): backfill the range in parts",
        )


def _days(ms: int) -> str:
    return f"{ms / 86_400_000:g} days"
