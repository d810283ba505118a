"""How long a member's shards stay its own after its ZooKeeper connection dropped.

ZooKeeper expires a session no sooner than the session timeout after the last request a
server took from it (the expiry is rounded up to the server's next tick, never down); only
then are the session's ephemeral owner nodes deleted, and only then may another member take
their shards. So a member whose connection dropped (its server died, or the ensemble is
electing a new leader, which closes every client's connection) still owns its shards until
``sent + timeout``, where ``sent`` is when it sent the last request a server answered: it
may go on dispatching them, rather than stop at once and lose every shard's state for a gap
that is usually under a second.

The member keeps that ``sent`` fresh with a heartbeat of its own (a small read every eighth
of the session timeout, ``HEARTBEAT_FRACTION``): kazoo's pings say nothing of when they were
answered. The lease ends ``margin`` (a third of the timeout) before the earliest expiry, for
what that bound does not see: the touch a follower answered but had not yet passed on to the
leader when it died (at most about one tick), the dispatcher's own batch in flight when the
lease ends, and the rate at which two machines' clocks drift apart (parts per million). A
connection that hangs rather than drops is noticed by kazoo only after two thirds of the
timeout without an answer, by when the lease has run out: such a member stops at once, as
it always did.

The bound assumes the server granted the session timeout the member asked for. ZooKeeper
lowers a request above its ``maxSessionTimeout`` (20 ticks by default: 40 s at the default
2 s tick), which kazoo does not report; a deployment that caps sessions below tikk's
``ownership_session_timeout_ms`` must raise the cap or lower the setting.

Time is injected (``clock``, monotonic seconds); this module does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

# A heartbeat every eighth of the session timeout (1.25 s at the default 10 s).
HEARTBEAT_FRACTION = 1 / 8
# The lease ends this share of the timeout before the earliest possible expiry.
MARGIN_FRACTION = 1 / 3

EMPTY: Mapping[int, int] = MappingProxyType({})


@dataclass(frozen=True)
class Lease:
    """Shard → epoch of the shards held when the connection dropped, and the monotonic time
    until which they stay ours."""

    shards: Mapping[int, int]
    until: float

    def without(self, released: Iterable[int]) -> Lease:
        gone = set(released)
        kept = {s: e for s, e in self.shards.items() if s not in gone}
        return Lease(MappingProxyType(kept), self.until)


class SessionLease:
    """The latest answered request's send time of one session, and the leases it grants."""

    def __init__(self, timeout_s: float, clock: Callable[[], float]) -> None:
        self._timeout_s = timeout_s
        self._clock = clock
        self._answered_sent: float | None = None
        self.heartbeat_s = timeout_s * HEARTBEAT_FRACTION
        self.margin_s = timeout_s * MARGIN_FRACTION

    def now(self) -> float:
        return self._clock()

    def answered(self, sent: float) -> None:
        """A request sent at ``sent`` (from ``now()``) was answered on the current session."""
        if self._answered_sent is None or sent > self._answered_sent:
            self._answered_sent = sent

    def forget(self) -> None:
        """The session is gone (expired, or closed): nothing it proved holds any more."""
        self._answered_sent = None

    def grant(self, shards: Mapping[int, int]) -> Lease | None:
        """A lease on ``shards`` that ends ``margin_s`` before the session can expire; None
        if there is nothing to hold or no time left."""
        if not shards or self._answered_sent is None:
            return None
        until = self._answered_sent + self._timeout_s - self.margin_s
        if until <= self._clock():
            return None
        return Lease(MappingProxyType(dict(shards)), until)

    def holds(self, lease: Lease | None) -> Mapping[int, int]:
        """The shards ``lease`` still holds now."""
        if lease is None or self._clock() >= lease.until:
            return EMPTY
        return lease.shards
