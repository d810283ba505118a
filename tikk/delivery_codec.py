"""The ready-queue message format: a serialised ``tikk.v1.Delivery``.

Producers (dispatcher) and the server, which receives deliveries back inside run results,
convert here and nowhere else.
"""

from __future__ import annotations

from tikk.buckets import shard_of
from tikk.errors import InvalidArgument
from tikk.model import Delivery, DueEntry
from tikk.schedules.model import schedule_of
from tikk.timestamps import to_timestamp
from tikk.v1 import worker_pb2


def to_proto(delivery: Delivery) -> worker_pb2.Delivery:
    e = delivery.entry
    msg = worker_pb2.Delivery(
        namespace=e.namespace,
        task_id=e.task_id,
        queue=e.queue,
        handler=e.handler,
        payload=e.payload,
        labels=dict(e.labels),
        attempt=e.attempt,
        max_attempts=e.max_attempts,
        scheduled_time=to_timestamp(e.scheduled_ms),
        due_time=to_timestamp(e.due_ms),
        fired_time=to_timestamp(delivery.fired_ms),
        idempotency_key=e.idempotency_key,
        trace_context=dict(delivery.trace_context or e.trace_context),
        token=delivery.token,
    )
    if e.start_timeout_ms:
        msg.start_timeout.FromMilliseconds(e.start_timeout_ms)
    if e.execution_timeout_ms:
        msg.execution_timeout.FromMilliseconds(e.execution_timeout_ms)
    return msg


def encode_delivery(delivery: Delivery) -> bytes:
    return to_proto(delivery).SerializeToString()


def encode_dead_letter(
    delivery: Delivery, error_type: str, error_message: str, at_ms: int
) -> bytes:
    return worker_pb2.DeadLetterRecord(
        delivery=to_proto(delivery),
        error_type=error_type,
        error_message=error_message,
        dead_lettered_time=to_timestamp(at_ms),
    ).SerializeToString()


def from_proto(msg: worker_pb2.Delivery, shard_count: int) -> Delivery:
    """The delivery ``msg`` names; ``InvalidArgument`` if a time in it is out of range (it
    comes back from workers, so it is input like any other)."""
    # A schedule's occurrences live in the schedule's shard; only schedules name tasks so.
    schedule_id = schedule_of(msg.task_id)
    entry = DueEntry(
        shard=shard_of(msg.namespace, schedule_id or msg.task_id, shard_count),
        due_ms=_ms(msg, "due_time"),
        namespace=msg.namespace,
        task_id=msg.task_id,
        attempt=msg.attempt,
        queue=msg.queue,
        handler=msg.handler,
        payload=msg.payload,
        labels=dict(msg.labels),
        max_attempts=msg.max_attempts,
        scheduled_ms=_ms(msg, "scheduled_time"),
        schedule_id=schedule_id,
        start_timeout_ms=_ms(msg, "start_timeout") if msg.HasField("start_timeout") else 0,
        execution_timeout_ms=(
            _ms(msg, "execution_timeout") if msg.HasField("execution_timeout") else 0
        ),
    )
    return Delivery(entry, _ms(msg, "fired_time"), dict(msg.trace_context), token=msg.token)


def _ms(msg: worker_pb2.Delivery, name: str) -> int:
    """The Timestamp or Duration field ``name`` in ms; protobuf refuses out-of-range values."""
    try:
        return int(getattr(msg, name).ToMilliseconds())
    except ValueError:
        raise InvalidArgument(f"delivery.{name}", "out of range") from None
