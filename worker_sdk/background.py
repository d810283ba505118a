"""Loops that run beside a worker's main loop and end with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

log = logging.getLogger("tikk.worker")


@contextlib.asynccontextmanager
async def beside(*loops: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run ``loops`` while the block runs; cancel each and wait for them on the way out.

    Each is a task of its own, so one that fails is logged when it fails and the others go
    on until the block ends. Waiting matters: a cancelled loop left unawaited can be logged
    as an exception never retrieved, and that line would be the last a worker prints (after,
    say, its own clear error about a queue URL)."""
    tasks = [asyncio.create_task(loop) for loop in loops]
    for task in tasks:
        task.add_done_callback(_log_failure)
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("a loop beside the worker failed: %r", exc, exc_info=exc)
