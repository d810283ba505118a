"""Coalescing of concurrent requests into batch writes.

Results reach the server one message at a time, from many worker streams; writing each on
its own costs a round trip and an event-loop wake-up per row. A ``Coalescer`` sends what
arrives while its previous batches are being written as the next batch: a lone item is
written at once (no timer, no added latency), and under load batches grow by themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
In = TypeVar("In")
Out = TypeVar("Out")


class Coalescer(Generic[Item]):
    """``submit`` returns when ``write`` stored a batch holding the item, or raises what that
    ``write`` raised (for every item of the batch)."""

    def __init__(
        self,
        write: Callable[[Sequence[Item]], Awaitable[None]],
        *,
        max_items: int = 512,
        in_flight: int = 2,
    ) -> None:
        self._write = write
        self._max_items = max_items
        self._slots = in_flight
        self._waiting: list[tuple[Item, asyncio.Future[None]]] = []
        self._drains: set[asyncio.Task[None]] = set()

    async def submit(self, item: Item) -> None:
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._slots:
            self._slots -= 1
            drain = asyncio.create_task(self._drain())
            self._drains.add(drain)
            drain.add_done_callback(self._drains.discard)
        await done

    async def _drain(self) -> None:
        """Write batches until nothing waits, then give the slot back."""
        try:
            while self._waiting:
                batch = self._waiting[: self._max_items]
                del self._waiting[: self._max_items]
                await self._write_batch(batch)
        finally:
            self._slots += 1

    async def _write_batch(self, batch: list[tuple[Item, asyncio.Future[None]]]) -> None:
        try:
            await self._write([item for item, _ in batch])
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else RuntimeError("batch write stopped")
            for _, done in batch:
                if not done.done():
                    done.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        for _, done in batch:
            if not done.done():
                done.set_result(None)


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
