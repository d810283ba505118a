"""The lease a ZooKeeper member holds its shards under after its connection dropped: from the
send time of the last answered request, ending a margin before the session can expire."""

from __future__ import annotations

import pytest

from dispatcher.ownership.session_lease import SessionLease

SHARDS = {0: 11, 3: 12}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def lease_of(timeout_s: float = 3.0) -> tuple[SessionLease, Clock]:
    clock = Clock()
    return SessionLease(timeout_s, clock), clock


def test_a_lease_counts_from_the_send_time_of_the_last_answered_request() -> None:
    leases, clock = lease_of(timeout_s=3.0)
    leases.answered(100.0)
    leases.answered(99.0)  # an older request answered late proves less: ignored
    clock.t = 100.5
    lease = leases.grant(SHARDS)
    assert lease is not None
    assert lease.until == pytest.approx(100.0 + 3.0 - 1.0)  # a third of the timeout short
    assert dict(leases.holds(lease)) == SHARDS
    clock.t = 101.99
    assert dict(leases.holds(lease)) == SHARDS
    clock.t = 102.0
    assert leases.holds(lease) == {}


def test_no_lease_without_an_answer_or_time_left_or_shards() -> None:
    leases, clock = lease_of(timeout_s=3.0)
    assert leases.grant(SHARDS) is None  # nothing was ever answered
    leases.answered(100.0)
    assert leases.grant({}) is None
    clock.t = 102.0  # a hang noticed this late: the lease would already have ended
    assert leases.grant(SHARDS) is None
    assert leases.holds(None) == {}


def test_a_forgotten_session_grants_nothing() -> None:
    leases, _ = lease_of()
    leases.answered(100.0)
    leases.forget()
    assert leases.grant(SHARDS) is None


def test_released_shards_leave_the_lease_and_the_rest_keep_its_end() -> None:
    leases, _ = lease_of()
    leases.answered(100.0)
    lease = leases.grant(SHARDS)
    assert lease is not None
    smaller = lease.without([3])
    assert (dict(smaller.shards), smaller.until) == ({0: 11}, lease.until)
    assert dict(lease.shards) == SHARDS  # a lease is a value: the original is unchanged


def test_the_heartbeat_is_an_eighth_of_the_timeout() -> None:
    leases, _ = lease_of(timeout_s=10.0)
    assert leases.heartbeat_s == 1.25
    assert leases.margin_s == pytest.approx(10 / 3)
