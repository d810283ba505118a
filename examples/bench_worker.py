"""The benchmark's worker: a no-op handler that records how late each run started.

Lateness samples (handler start minus due time, ms) are appended to ``$TIKK_BENCH_OUT``.
"""

from __future__ import annotations

import asyncio
import os
import time

from worker_sdk import TaskContext, Worker

worker = Worker(queues=["bench"], concurrency=64)
_samples: list[str] = []
_flusher: asyncio.Task[None] | None = None


async def _flush_forever() -> None:
    while True:
        await asyncio.sleep(0.2)
        if _samples:
            lines, _samples[:] = "".join(_samples), []
            await asyncio.to_thread(_append, lines)


def _append(lines: str) -> None:
    with open(os.environ["TIKK_BENCH_OUT"], "a", encoding="utf-8") as f:
        f.write(lines)


@worker.handler("noop")
async def noop(ctx: TaskContext, payload: bytes) -> None:
    global _flusher  # noqa: PLW0603 - one flusher per worker process
    late = time.time_ns() // 1_000_000 - int(ctx.due_time.timestamp() * 1000)
    fired = int(ctx.fired_time.timestamp() * 1000) - int(ctx.due_time.timestamp() * 1000)
    _samples.append(f"{late} {fired}\n")
    if _flusher is None:
        _flusher = asyncio.create_task(_flush_forever())
