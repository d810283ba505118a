"""The worker's queue consumers, and the one switch between their backends.

``open_consumer`` picks the backend by the URL's scheme; each backend module is imported only
when its scheme is used, so the Kafka driver stays an optional extra. The protocol is
``worker_sdk.queues.consumer``; the wire contract both sides follow is ``tikk.queue_contract``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tikk.clock import Clock
from tikk.errors import InvalidArgument
from tikk.queue_contract import KAFKA_SCHEME, LOCAL_SCHEME, split_queue_url
from worker_sdk.queues.consumer import GroupTiming, QueueConsumer


def open_consumer(
    url: str,
    queues: Sequence[str],
    visibility_ms: int,
    timing: GroupTiming | None = None,
    *,
    clock: Clock | None = None,
) -> QueueConsumer:
    """The consumer for a queue URL handed out by the server's ``GetWorkerConfig``, not started
    (no I/O yet). ``timing`` applies to queues with consumer groups (Kafka); the default is
    ``GroupTiming()``. ``clock`` times the leases of queues that lease each message (the
    local queue); the default is the system clock. Raises ``InvalidArgument`` (field
    ``queue_url``) for a URL of another scheme, naming the known ones, or one its backend
    cannot parse."""
    scheme, rest = split_queue_url(url)
    if scheme == LOCAL_SCHEME:
        from worker_sdk.queues.local import LocalQueueConsumer

        return LocalQueueConsumer(rest, queues, visibility_ms, clock=clock)
    if scheme == KAFKA_SCHEME:
        # Kafka has no per-message lease, so the visibility timeout does not apply there.
        from worker_sdk.queues.kafka import KafkaQueueConsumer

        return KafkaQueueConsumer.from_url(url, queues, timing)
    known = ", ".join((LOCAL_SCHEME, KAFKA_SCHEME))
    raise InvalidArgument("queue_url", f"no consumer for {scheme!r} here (known: {known})")
