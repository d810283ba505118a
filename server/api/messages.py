"""Domain objects → protobuf messages that more than one service answers with."""

from __future__ import annotations

from tikk.model import RetryPolicy, Task
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import tasks_pb2


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
    if t.execution_timeout_ms:
        msg.execution_timeout.FromMilliseconds(t.execution_timeout_ms)
    return msg
