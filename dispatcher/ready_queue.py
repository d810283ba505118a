"""The producer side of a ready queue: where due tasks are handed to workers.

Messages are serialised ``tikk.v1.Delivery`` (see ``tikk.delivery_codec``), one stream per
task queue, keyed by task key. The consumer side lives in ``worker_sdk``.
Backends: ``dispatcher.local_queue`` (embedded, a SQLite file shared with local workers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tikk.model import Delivery

DEAD_LETTER_SUFFIX = ".dlq"


def dead_letter_queue(queue: str) -> str:
    """Name of the dead-letter stream of ``queue``."""
    return queue + DEAD_LETTER_SUFFIX


class ReadyQueue(Protocol):
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

    async def close(self) -> None:
        """Flush and release connections; idempotent."""
        ...
