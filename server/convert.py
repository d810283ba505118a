"""Domain objects → protobuf messages for the API responses."""

from __future__ import annotations

from tikk.model import RetryPolicy, RunRecord, Task
from tikk.schedules.model import OccurrenceRecord
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, tasks_pb2


def retry_to_proto(r: RetryPolicy) -> tasks_pb2.RetryPolicy:
    return tasks_pb2.RetryPolicy(
        max_attempts=r.max_attempts,
        initial_backoff=to_duration(r.initial_backoff_ms),
        multiplier=r.multiplier,
        max_backoff=to_duration(r.max_backoff_ms),
        jitter=r.jitter,
    )


def task_to_proto(t: Task) -> tasks_pb2.Task:
    msg = tasks_pb2.Task(
        namespace=t.namespace,
        id=t.task_id,
        queue=t.queue,
        handler=t.handler,
        payload=t.payload,
        labels=dict(t.labels),
        retry_policy=retry_to_proto(t.retry),
        state=int(t.state),  # type: ignore[arg-type]
        attempt=t.attempt,
        due_time=to_timestamp(t.due_ms),
        scheduled_time=to_timestamp(t.scheduled_ms),
        create_time=to_timestamp(t.created_ms),
        update_time=to_timestamp(t.updated_ms),
        idempotency_key=t.idempotency_key,
        last_error_type=t.last_error_type,
        last_error_message=t.last_error_message,
        shard=t.shard,
        schedule_id=t.schedule_id,
    )
    if t.start_timeout_ms:
        msg.start_timeout.FromMilliseconds(t.start_timeout_ms)
    return msg


def run_to_proto(r: RunRecord) -> history_pb2.Run:
    return history_pb2.Run(
        namespace=r.namespace,
        run_id=r.run_id,
        task_id=r.task_id,
        queue=r.queue,
        handler=r.handler,
        attempt=r.attempt,
        status=int(r.status),  # type: ignore[arg-type]
        scheduled_time=to_timestamp(r.scheduled_ms),
        due_time=to_timestamp(r.due_ms),
        fired_time=to_timestamp(r.fired_ms),
        start_time=to_timestamp(r.started_ms),
        finish_time=to_timestamp(r.finished_ms),
        worker_id=r.worker_id,
        error_type=r.error_type,
        error_message=r.error_message,
        output=r.output,
        idempotency_key=r.idempotency_key,
    )


def occurrence_to_proto(r: OccurrenceRecord) -> history_pb2.ScheduleOccurrence:
    return history_pb2.ScheduleOccurrence(
        namespace=r.namespace,
        schedule_id=r.schedule_id,
        nominal_time=to_timestamp(r.nominal_ms),
        fire_time=to_timestamp(r.fire_ms),
        outcome=int(r.outcome),  # type: ignore[arg-type]
        decide_time=to_timestamp(r.decided_ms),
        lateness=to_duration(r.lateness_ms),
        task_id=r.task_id,
        reason=r.reason,
    )
