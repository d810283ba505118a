"""The ready queue's port, as the dispatcher and the server use it: where due tasks are handed
to workers, and what waits there.

Messages are serialised ``tikk.v1.Delivery`` (see ``tikk.delivery_codec``), one stream per
task queue, keyed by task key. The consumer side lives in ``worker_sdk``; what both sides must
agree on (names, URLs, headers, the embedded queue's table) is ``tikk.queue_contract``.
The producers are ``dispatcher.ready_queue.local`` (embedded, a SQLite file shared with local
workers) and ``dispatcher.ready_queue.kafka``.

Lifecycle: constructing a backend does no I/O; ``start`` connects (or opens the file) and
must be awaited before anything else; ``close`` releases it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tikk.model import Delivery


@dataclass(frozen=True)
class QueueBacklog:
    """What waits in one queue at the moment it was read.

    ``waiting``: messages published and not yet consumed for good (committed), including those
    a worker is running now. ``oldest_enqueued_ms``: when the oldest of them was appended
    (``None`` when nothing waits). ``consumers``: active consumers of the queue, ``None`` when
    the backend cannot tell.
    """

    queue: str
    waiting: int
    oldest_enqueued_ms: int | None
    consumers: int | None = None


def with_idle(found: Mapping[str, QueueBacklog], names: Iterable[str]) -> list[QueueBacklog]:
    """``found``, plus an empty backlog for each of ``names`` not in it, sorted by queue."""
    every = {name: QueueBacklog(name, 0, None) for name in names} | dict(found)
    return [every[name] for name in sorted(every)]


class ReadyQueue(Protocol):
    async def start(self) -> None:
        """Connect to the backend (open the file, reach the brokers); await it once, before
        any other call. Idempotent. Raises ``BackendUnavailable`` if the backend cannot be
        reached."""
        ...

    async def prepare(self, queues: Collection[str]) -> None:
        """Make sure each of ``queues`` and its dead-letter stream exist, so that a task of
        the queue can be published later. Idempotent, and cached per process: a queue
        prepared once costs nothing again. Raises ``BackendUnavailable`` when the queue
        cannot be reached (nothing is known to exist then), ``InvalidArgument`` or
        ``FailedPrecondition`` naming the stream when the backend refuses it.
        """
        ...

    async def publish(self, deliveries: Sequence[Delivery]) -> None:
        """Append ``deliveries`` to their queues; returns only once all are durably accepted
        (the dispatcher advances its cursor after this returns). Not idempotent: a repeated
        call delivers twice, which workers tolerate through the idempotency key.
        Raises ``BackendUnavailable`` if the queue did not confirm; then none, some or all
        may have been stored, and the caller publishes again.
        """
        ...

    async def publish_dead_letter(
        self, delivery: Delivery, error_type: str, error_message: str
    ) -> None:
        """Append a dead-lettered task to its queue's dead-letter stream (``<queue>.dlq``), for
        consumers that watch dead letters. The task store stays the record of truth (listing
        and re-driving use it); this copy is for alerting and inspection. Raises
        ``BackendUnavailable`` if not confirmed."""
        ...

    async def backlog(self, queues: Collection[str] = ()) -> list[QueueBacklog]:
        """What waits in each task queue, sorted by name: those in ``queues``, those this
        object prepared or published to, and those the backend holds (a queue with nothing
        waiting may be left out unless it is one of the first two kinds). Dead-letter streams
        are not listed. Read-only; a snapshot that may be a moment behind. Raises
        ``BackendUnavailable`` if the backend did not answer.
        """
        ...

    async def ping(self) -> None:
        """Ask the backend the cheapest question that proves it answers now, as a readiness
        probe does (the embedded queue reads its file; Kafka answers a metadata request
        naming no topic). Publishes and creates nothing; idempotent. Raises
        ``BackendUnavailable`` when it does not answer (the caller bounds the wait)."""
        ...

    async def close(self) -> None:
        """Flush and release connections; idempotent, and safe whether or not ``start`` ran
        or succeeded."""
        ...
