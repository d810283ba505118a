"""Loops that run beside a worker's main loop and end with it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def beside(*loops: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run ``loops`` while the block runs; cancel them and wait for them on the way out.

    Waiting matters: a cancelled gather left unawaited is logged as an exception never
    retrieved, and that line would be the last a worker prints (after, say, its own clear
    error about a queue URL)."""
    side = asyncio.gather(*loops)
    try:
        yield
    finally:
        side.cancel()
        await asyncio.gather(side, return_exceptions=True)
