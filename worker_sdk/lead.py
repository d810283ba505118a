"""Deliveries that arrive before they are due, held until the server's clock reaches their due
time.

The dispatcher hands a task to its queue ``lead_ms`` before it is due (``DispatchSettings``),
so the queue's and the worker's latency up to that much never lands on the start: the worker
holds the delivery and starts it at its due instant. *Never early* is judged by the server's
clock, not the worker's, which may be set wrong: ``ServerClock`` keeps a lower bound of the
server's clock. Each ``GetWorkerConfig`` answer carries ``server_time``, stamped before the
answer arrived, so at any later instant the server's clock reads at least ``server_time`` plus
the time elapsed since the answer arrived (measured on the worker's monotonic clock, which no
setting of its wall clock moves). The largest such bound of the recent answers is the estimate:
a start may be late by up to a round trip to the server, never early by its clock. Answers are
asked for again every ``PROBE_EVERY_S`` (clocks drift), and bounds older than ``KEEP_S`` are
dropped (the newest is always kept). A server that sends no time (an older one) leaves the
worker's own wall clock in charge.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc

from tikk.clock import Clock
from tikk.v1 import worker_pb2

log = logging.getLogger("tikk.worker")

PROBE_EVERY_S = 10.0
KEEP_S = 60.0
_PROBE_TIMEOUT_S = 5.0


class ServerClock:
    """A lower bound of the server's clock, from its answers; ``wall`` (the worker's own
    clock) where there is none yet. ``monotonic`` is in seconds."""

    def __init__(self, wall: Clock, monotonic: Callable[[], float]) -> None:
        self._wall = wall
        self._monotonic = monotonic
        # (monotonic ms when the answer was in hand, the server's time in it)
        self._samples: deque[tuple[float, int]] = deque()

    def sample(self, answer: worker_pb2.GetWorkerConfigResponse) -> None:
        """Take the server's time from an answer just received (none in it: nothing)."""
        if not answer.HasField("server_time"):
            return
        now = self._monotonic() * 1000
        self._samples.append((now, answer.server_time.ToMilliseconds()))
        while len(self._samples) > 1 and now - self._samples[0][0] > KEEP_S * 1000:
            self._samples.popleft()

    @property
    def measured(self) -> bool:
        return bool(self._samples)

    def now_ms(self) -> int:
        """The server's clock now, at the least (the worker's wall clock without a sample)."""
        if not self._samples:
            return self._wall.now_ms()
        now = self._monotonic() * 1000
        return int(max(server + (now - at) for at, server in self._samples))

    def offset_ms(self) -> int:
        """How far the server's clock is ahead of the worker's wall clock, at the least."""
        return self.now_ms() - self._wall.now_ms()


async def until_due(clock: ServerClock, delivery: worker_pb2.Delivery) -> None:
    """Return once the server's clock has reached the delivery's due time."""
    due_ms = delivery.due_time.ToMilliseconds()
    wait_ms = due_ms - clock.now_ms()
    while wait_ms > 0:  # again: a timer may end a little early, and the bound may move
        await asyncio.sleep(wait_ms / 1000)
        wait_ms = due_ms - clock.now_ms()


async def probe(stub: Any, clock: ServerClock) -> None:
    """Ask the server's time every ``PROBE_EVERY_S`` until cancelled; a failure leaves the
    bounds already taken (they stay valid, only less tight)."""
    while True:
        await asyncio.sleep(PROBE_EVERY_S)
        try:
            answer = await stub.GetWorkerConfig(
                worker_pb2.GetWorkerConfigRequest(), timeout=_PROBE_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            log.debug("asking the server's time failed (%s); the last bound holds", exc.code())
            continue
        clock.sample(answer)
