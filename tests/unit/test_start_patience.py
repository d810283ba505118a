"""``server.start_patience``: what does not answer yet is tried again until the patience runs
out; what refuses is not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from server.start_patience import patiently
from tikk.clock import ManualClock
from tikk.errors import BackendRefused, BackendUnavailable

T0 = 1_700_000_000_000


class Opener:
    """Fails with ``errors`` in turn, then answers "opened"; each call advances ``clock`` by
    ``cost_ms`` (an attempt's own time: a connect timeout)."""

    def __init__(self, clock: ManualClock, errors: list[Exception], cost_ms: int = 0) -> None:
        self.clock, self.errors, self.cost_ms = clock, errors, cost_ms
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        self.clock.advance(self.cost_ms)
        if self.errors:
            raise self.errors.pop(0)
        return "opened"


async def _open(opener: Opener, patience_ms: int, stop: asyncio.Event | None = None) -> str:
    return await patiently(
        opener,
        what="the store",
        patience_ms=patience_ms,
        clock=opener.clock,
        stop=stop or asyncio.Event(),
        first_wait_ms=1,
    )


async def test_what_answers_after_two_failures_opens_and_each_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock(T0)
    opener = Opener(clock, [BackendUnavailable("no node"), BackendUnavailable("election")])
    with caplog.at_level(logging.WARNING, logger="tikk"):
        assert await _open(opener, patience_ms=60_000) == "opened"
    assert opener.calls == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "the store did not open (attempt 1): no node" in lines[0]
    assert "(attempt 2): election" in lines[1]


async def test_a_refusal_is_raised_at_once() -> None:
    opener = Opener(ManualClock(T0), [BackendRefused("cassandra", "db1", "tikk", "bad password")])
    with pytest.raises(BackendRefused):
        await _open(opener, patience_ms=60_000)
    assert opener.calls == 1


async def test_the_last_error_is_raised_once_the_patience_is_spent() -> None:
    errors: list[Exception] = [BackendUnavailable(f"attempt {i}") for i in range(1, 10)]
    opener = Opener(ManualClock(T0), errors, cost_ms=1_000)
    with pytest.raises(BackendUnavailable, match="attempt 3"):
        await _open(opener, patience_ms=2_500)
    assert opener.calls == 3


async def test_a_stop_ends_the_waiting() -> None:
    stop = asyncio.Event()
    errors: list[Exception] = [BackendUnavailable("down")] * 10
    opener = Opener(ManualClock(T0), errors)
    stop.set()
    with pytest.raises(BackendUnavailable, match="down"):
        await _open(opener, patience_ms=60_000, stop=stop)
    assert opener.calls == 1
