"""The benchmark's worker: a no-op handler that records, for every run, the task id, how late
the handler started and how late the dispatcher handed the task to the queue (ms after due).

Lines ``<task id> <due → handler start> <due → queue>`` are appended to ``$TIKK_BENCH_OUT``;
the task id lets the benchmark count every fired task once and see duplicates. ``fail`` fails
for good at once, so a benchmark can fill the dead letters.
"""

from __future__ import annotations

import asyncio
import os
import time

from worker_sdk import NonRetryableError, TaskContext, Worker

# At 1,000 fires/s over two workers each holds about 500/s times the server's acknowledgement time
# (150-250 ms on the stack with every service on one machine) of results: more than the
# default backlog (one per slot), which would cap each worker near 300 starts a second.
worker = Worker(queues=["bench"], concurrency=64, result_backlog=256)
_lines: list[str] = []
_flusher: list[asyncio.Task[None]] = []


async def _flush_forever() -> None:
    # Written in the background, off the handler's path, a few times a second.
    while True:
        await asyncio.sleep(0.2)
        if _lines:
            text = "".join(_lines)
            _lines.clear()
            await asyncio.to_thread(_append, text)


def _append(text: str) -> None:
    with open(os.environ["TIKK_BENCH_OUT"], "a", encoding="utf-8") as f:
        f.write(text)


@worker.handler("noop")
async def noop(ctx: TaskContext, payload: bytes) -> None:
    started_ms = time.time_ns() // 1_000_000
    due_ms = int(ctx.due_time.timestamp() * 1000)
    fired_ms = int(ctx.fired_time.timestamp() * 1000)
    _lines.append(f"{ctx.task_id} {started_ms - due_ms} {fired_ms - due_ms}\n")
    if not _flusher:
        _flusher.append(asyncio.create_task(_flush_forever()))


@worker.handler("fail")
async def fail(ctx: TaskContext, payload: bytes) -> None:
    raise NonRetryableError(f"{ctx.task_id} fails on purpose")
