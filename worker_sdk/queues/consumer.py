"""The consumer side of the ready queue, as the worker sees it: the protocol and its messages.

Backends: ``worker_sdk.queues.local`` (``local://`` URLs, the embedded queue) and
``worker_sdk.queues.kafka`` (``kafka://`` URLs); ``worker_sdk.queues.open_consumer`` picks one.
They import this module, never the other way round. A Worker that cannot report results closes
its consumer and later opens a new one, so every backend must take a ``commit`` for a message of
a closed consumer as a harmless no-op.

Lifecycle: constructing a consumer does no I/O; ``start`` connects and must be awaited before
``fetch``; ``close`` releases it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import DecodeError

from tikk.v1 import worker_pb2


@dataclass(frozen=True)
class Message:
    """One leased message. ``receipt`` is backend-specific and identifies this lease.

    ``body`` is the message as stored. On a task queue it is the serialised ``delivery``; on a
    dead-letter stream (``<queue>.dlq``) it is a ``tikk.v1.DeadLetterRecord``, which readers
    parse from ``body`` (``delivery`` is then empty, see ``decode_delivery``).

    ``headers`` are the transport's message headers where it has them (Kafka), text only.
    """

    delivery: worker_pb2.Delivery
    delivery_count: int
    receipt: object
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


def decode_delivery(body: bytes) -> worker_pb2.Delivery:
    """The ``Delivery`` in ``body``; empty if ``body`` is not one (a dead-letter record), so a
    message that does not parse is still handed out instead of failing every fetch."""
    try:
        return worker_pb2.Delivery.FromString(body)
    except DecodeError:
        return worker_pb2.Delivery()


# Kafka's rule for a group.instance.id (as for a topic name); the broker refuses any other.
_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class GroupTiming:
    """Consumer-group timing and membership, for queues whose consumers form groups (Kafka;
    the local queue leases each message instead and ignores it).

    The session bounds how long a dead worker's partitions wait for a new owner; brokers
    refuse less than their ``group.min.session.timeout.ms`` (6 s by default). The heartbeat is
    how quickly a member learns of a rebalance; it must be under a third of the session, so
    that a member whose heartbeat is late once or twice keeps its partitions. ``ValueError``
    names a bad combination.

    ``instance_id`` makes the member static (Kafka's static membership): a member that comes
    back under the same id within the session takes its partitions back and the others keep
    theirs, where a new member would make the whole group stop and rebalance, twice per
    restart (once to leave, once to join). The price: a static member that stops does not
    leave, so its partitions wait out the session before they move. Each live member needs its
    own id (the broker fences the older of two); None (the default) is a dynamic member.
    """

    session_timeout_ms: int = 6_000
    heartbeat_interval_ms: int = 1_000
    max_poll_interval_ms: int = 30 * 60 * 1000
    instance_id: str | None = None

    def __post_init__(self) -> None:
        if self.instance_id is not None and not _INSTANCE_ID.fullmatch(self.instance_id):
            raise ValueError(
                f"instance id {self.instance_id!r}: 1-249 characters of A-Z a-z 0-9 . _ -"
            )
        if self.heartbeat_interval_ms <= 0:
            raise ValueError(
                f"heartbeat interval must be positive ({self.heartbeat_interval_ms} ms)"
            )
        if self.heartbeat_interval_ms * 3 >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat interval ({self.heartbeat_interval_ms} ms) must be less than a "
                f"third of the session timeout ({self.session_timeout_ms} ms)"
            )


class QueueConsumer(Protocol):
    async def start(self) -> None:
        """Connect (open the queue file; on Kafka, create missing topics and join the
        groups); await it before the first ``fetch``. Idempotent; may be awaited again after
        it failed. Raises ``BackendUnavailable`` if the queue cannot be reached, and after
        ``close``."""
        ...

    async def fetch(self, max_messages: int) -> list[Message]:
        """Lease up to ``max_messages`` visible messages of the consumer's queues; returns at
        once, possibly empty. A leased message is invisible to other consumers until it is
        committed or its lease runs out."""
        ...

    def on_arrival(self, wake: Callable[[], None]) -> bool:
        """After ``start``: have ``wake`` called on the running loop whenever messages may have
        arrived, so that an idle worker fetches at once rather than on its next poll. Returns
        whether this queue can do so (False: poll; a Kafka fetch waits for messages itself). A
        call may come with nothing new to fetch, and a new message may come without a call
        (e.g. a lease that ran out), so a worker still polls, only less often. Stops at
        ``close``."""
        ...

    async def commit(self, message: Message) -> None:
        """The message is done (the server acknowledged its result): remove it. A lease that
        already ran out is not an error; the message may then be delivered again. After
        ``close`` it does nothing (the message goes to whoever reads it next). Idempotent.
        Raises ``BackendUnavailable`` if the queue cannot be reached (the message is then
        delivered again)."""
        ...

    async def commit_many(self, messages: Sequence[Message]) -> None:
        """``commit`` of each of ``messages`` (any order, any of the consumer's queues) in one
        transaction or request where the backend has one: how a Worker commits, since one
        statement or request per message would cost more than the rest of a run. What
        ``commit`` says of each message holds: the rules for run-out leases, ``close`` and
        idempotence are the same. Raises ``BackendUnavailable``; then none or only some are
        committed, and the rest are delivered again."""
        ...

    async def extend(self, messages: Sequence[Message]) -> None:
        """Renew the leases of messages still being worked on; nothing after ``close``."""
        ...

    async def close(self) -> None:
        """Release resources (leave the group, where there is one); uncommitted messages are
        delivered again later, to this or another consumer. Idempotent, and safe whether or not
        ``start`` ran or succeeded."""
        ...
