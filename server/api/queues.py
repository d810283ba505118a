"""The queues' messages: a ``QueueView`` as a ``tikk.v1.QueueInfo``, and an
``UpdateQueueRequest`` as a checked ``QueueChange``."""

from __future__ import annotations

import math

from server.api import validation
from server.ops.queues import HELD_COUNT_MOST, QueueChange, QueueView
from tikk.errors import InvalidArgument
from tikk.queue_holds import MAX_RATE_PER_S
from tikk.settings import TEN_YEARS_MS, Limits
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import tasks_pb2


def queue_to_proto(view: QueueView, now_ms: int) -> tasks_pb2.QueueInfo:
    b, c = view.backlog, view.control
    info = tasks_pb2.QueueInfo(name=b.queue, waiting=b.waiting, paused=c.paused,
                               max_per_second=c.rate_per_s)  # fmt: skip
    if b.oldest_enqueued_ms is not None:
        info.oldest_waiting_age.CopyFrom(to_duration(max(0, now_ms - b.oldest_enqueued_ms)))
    if b.consumers is not None:
        info.consumers = b.consumers
    if c.paused_ms:
        info.paused_time.CopyFrom(to_timestamp(c.paused_ms))
    if c.skip_older_than_ms:
        info.skip_older_than.CopyFrom(to_duration(c.skip_older_than_ms))
    info.held = min(view.held, HELD_COUNT_MOST)
    info.held_more = view.held > HELD_COUNT_MOST
    return info


def queue_change(req: tasks_pb2.UpdateQueueRequest, limits: Limits) -> tuple[str, QueueChange]:
    """The queue ``req`` names and the change it asks for; ``InvalidArgument`` naming the
    field that is wrong."""
    queue = validation.queue(req.name, limits, "name")
    rate = req.max_per_second if req.HasField("max_per_second") else None
    if rate is not None and not (math.isfinite(rate) and 0 <= rate <= MAX_RATE_PER_S):
        raise InvalidArgument("max_per_second", f"must be 0 (no limit) to {MAX_RATE_PER_S:,.0f}")
    skip = None
    if req.HasField("skip_older_than"):
        skip = validation.duration_ms(req.skip_older_than, "skip_older_than", TEN_YEARS_MS)
    paused = req.paused if req.HasField("paused") else None
    return queue, QueueChange(paused, rate, skip)
