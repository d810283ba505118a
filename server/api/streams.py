"""Serving request streams: many messages of one stream handled at once, answered in order.

Imports and worker results both need it: each message is handled as soon as it arrives, up to
a window, and the answers go back in request order; while the window is full nothing more is
read, so gRPC's flow control holds a fast client back to the pace of the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


async def answer_in_order(
    requests: AsyncIterator[In], handle: Callable[[In], Coroutine[Any, Any, Out]], window: int
) -> AsyncIterator[Out]:
    """``handle`` each request, up to ``window`` at once, yielding each answer as soon as it
    and those before it are done, in request order; no request is read while ``window`` are
    unanswered. Reading goes on while answers wait to be taken, so a long-lived stream
    (worker results) gets each answer without waiting for more requests."""
    slots = asyncio.Semaphore(window)
    started: asyncio.Queue[asyncio.Task[Out] | None] = asyncio.Queue()
    handling: list[asyncio.Task[Out]] = []

    async def read() -> None:
        try:
            stream = aiter(requests)
            while True:
                await slots.acquire()
                try:
                    request = await anext(stream)
                except StopAsyncIteration:
                    return
                task = asyncio.create_task(handle(request))
                handling.append(task)
                started.put_nowait(task)
        finally:
            started.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        while (task := await started.get()) is not None:
            answer = await task
            handling.remove(task)
            slots.release()
            yield answer
        await reader  # a broken request stream raises here
    finally:
        reader.cancel()
        for task in handling:
            task.cancel()
