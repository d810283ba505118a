"""The slots of a Worker's runs: waiting for slots to free, and being woken to stop."""

from __future__ import annotations

import asyncio

import pytest

from tikk.v1 import worker_pb2
from worker_sdk.inflight import Held, InFlight
from worker_sdk.queues.consumer import Message
from worker_sdk.queues.local import LocalQueueConsumer

HELD = Held(LocalQueueConsumer("unused.db", ["q"], 1000), Message(worker_pb2.Delivery(), 1, None))


async def settle() -> None:
    """Let every callback and task that is ready run (runs ending, waiters waking)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def run(gate: asyncio.Event) -> None:
    await gate.wait()


def runs_until(inflight: InFlight, gates: list[asyncio.Event]) -> None:
    """One run per gate, each ending when its gate is set."""
    for gate in gates:
        inflight.add(asyncio.create_task(run(gate)), HELD)


async def test_until_free_returns_once_enough_runs_ended() -> None:
    inflight = InFlight(3)
    gates = [asyncio.Event() for _ in range(3)]
    runs_until(inflight, gates)
    assert (len(inflight), inflight.free) == (3, 0)
    waiter = asyncio.create_task(inflight.until_free(2, 3600))
    gates[0].set()
    await settle()
    assert inflight.free == 1 and not waiter.done()  # one slot is not enough
    gates[1].set()
    async with asyncio.timeout(10):
        await waiter
    assert inflight.free == 2
    gates[2].set()
    await inflight.drain(10)
    assert len(inflight) == 0


async def test_wake_ends_every_wait_from_then_on() -> None:
    inflight = InFlight(1)
    gate = asyncio.Event()
    runs_until(inflight, [gate])
    waiter = asyncio.create_task(inflight.until_free(1, 3600))
    await settle()
    assert not waiter.done()
    inflight.wake()  # the worker is asked to stop
    async with asyncio.timeout(10):
        await waiter
        await inflight.until_free(1, 3600)  # later waits do not sleep either
    assert inflight.free == 0
    inflight.cancel()
    await settle()
    assert len(inflight) == 0 and not gate.is_set()


def test_a_worker_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one"):
        InFlight(0)


async def handler_then_report(
    inflight: InFlight, handler: asyncio.Event, ack: asyncio.Event
) -> None:
    """A run whose handler ends with ``handler`` and whose result is acknowledged with ``ack``."""
    await handler.wait()
    inflight.ran()
    await ack.wait()


async def test_a_run_whose_handler_returned_frees_its_slot_and_keeps_its_backlog_place() -> None:
    inflight = InFlight(2, backlog=3)
    handlers, acks = [asyncio.Event() for _ in range(3)], [asyncio.Event() for _ in range(3)]
    for handler, ack in zip(handlers[:2], acks[:2], strict=True):
        inflight.add(asyncio.create_task(handler_then_report(inflight, handler, ack)), HELD)
    assert (inflight.running, inflight.free) == (2, 0)
    handlers[0].set()
    handlers[1].set()
    async with asyncio.timeout(10):
        await inflight.until_free(1, 3600)
    # Both slots are free, but only one more message fits the backlog of three.
    assert (inflight.running, inflight.reporting, inflight.free) == (0, 2, 1)
    inflight.add(asyncio.create_task(handler_then_report(inflight, handlers[2], acks[2])), HELD)
    assert inflight.free == 0  # the backlog is full: intake pauses
    acks[0].set()
    async with asyncio.timeout(10):
        await inflight.until_free(1, 3600)
    assert (len(inflight), inflight.running, inflight.reporting) == (2, 1, 1)
    handlers[2].set()
    for ack in acks:
        ack.set()
    await inflight.drain(10)
    assert len(inflight) == 0 and inflight.free == 2


def test_a_backlog_smaller_than_the_slots_is_refused() -> None:
    with pytest.raises(ValueError, match="at least the concurrency"):
        InFlight(4, backlog=3)
