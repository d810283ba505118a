"""Waiting for a state in tests: poll a check until it holds, or fail saying what it last saw.

A test that waits for something to happen waits here (or on an event the code offers), never
on a bare sleep whose length hopes the state was reached: under load a sleep is too short,
and otherwise it is too long. A sleep stays only where letting time pass is the point (to
show that nothing happens meanwhile, or to pace a workload), with a comment saying so.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


def eventually(check: Callable[[], Any], timeout: float = 20.0, every: float = 0.1) -> Any:
    """Poll ``check`` until it returns a truthy value, and return that value; fail with its
    last value after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout}s (last value: {value!r})")


async def eventually_async(
    check: Callable[[], Any], within_s: float = 20.0, every_s: float = 0.02, what: str = ""
) -> Any:
    """``eventually`` inside an event loop, which keeps running between polls; ``check`` may
    be a coroutine function. ``what`` names the awaited state in the failure."""
    deadline = time.monotonic() + within_s
    value = None
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(every_s)
    named = f" ({what})" if what else ""
    raise AssertionError(f"condition{named} not met within {within_s}s (last value: {value!r})")
