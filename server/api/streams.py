"""Serving request streams: many messages of one stream handled at once, up to a window.

Imports and worker results both need it: each message is handled as soon as it arrives, up to
a window; while the window is full nothing more is read, so gRPC's flow control holds a fast
client back to the pace of the store. Imports answer in request order (``answer_in_order``:
a client matches answers to its batches by position); worker results answer each batch as
soon as it is done (``answer_as_done``: every acknowledgement names its run), so one slow
batch holds back no other's acknowledgements.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


async def _read(
    requests: AsyncIterator[In],
    handle: Callable[[In], Coroutine[Any, Any, Out]],
    slots: asyncio.Semaphore,
    started: Callable[[asyncio.Task[Out] | None], None],
) -> None:
    """Start ``handle`` of each request once a slot is free, telling ``started`` of each
    task, and of the stream's end (None) however it ends."""
    try:
        stream = aiter(requests)
        while True:
            await slots.acquire()
            try:
                request = await anext(stream)
            except StopAsyncIteration:
                return
            started(asyncio.create_task(handle(request)))
    finally:
        started(None)


async def answer_in_order(
    requests: AsyncIterator[In], handle: Callable[[In], Coroutine[Any, Any, Out]], window: int
) -> AsyncIterator[Out]:
    """``handle`` each request, up to ``window`` at once, yielding each answer as soon as it
    and those before it are done, in request order; no request is read while ``window`` are
    unanswered. Reading goes on while answers wait to be taken, so a long-lived stream gets
    each answer without waiting for more requests."""
    slots = asyncio.Semaphore(window)
    started: asyncio.Queue[asyncio.Task[Out] | None] = asyncio.Queue()
    handling: list[asyncio.Task[Out]] = []

    def note(task: asyncio.Task[Out] | None) -> None:
        if task is not None:
            handling.append(task)
        started.put_nowait(task)

    reader = asyncio.create_task(_read(requests, handle, slots, note))
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


async def answer_as_done(
    requests: AsyncIterator[In], handle: Callable[[In], Coroutine[Any, Any, Out]], window: int
) -> AsyncIterator[Out]:
    """``handle`` each request, up to ``window`` at once, yielding each answer as soon as it
    is done, whatever the order; no request is read while ``window`` are unanswered."""
    slots = asyncio.Semaphore(window)
    done: asyncio.Queue[asyncio.Task[Out] | None] = asyncio.Queue()
    handling: set[asyncio.Task[Out]] = set()

    def note(task: asyncio.Task[Out] | None) -> None:
        if task is None:
            done.put_nowait(None)
        else:
            handling.add(task)
            task.add_done_callback(done.put_nowait)

    reader = asyncio.create_task(_read(requests, handle, slots, note))
    ended = False
    try:
        while not (ended and not handling):
            task = await done.get()
            if task is None:
                ended = True
                continue
            handling.discard(task)
            slots.release()
            yield task.result()
        await reader  # a broken request stream raises here
    finally:
        reader.cancel()
        for task in handling:
            task.cancel()
