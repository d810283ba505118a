"""The worker of ``test_worker_conveniences``, run as a real process (``tikk worker``): typed
handlers, a timeout, a handler limited to two runs at once, and handlers that run until
their task is cancelled. Every start and end is appended as one JSON line to ``TIKK_E2E_LOG``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass

from worker_sdk import RunHooks, TaskContext, Worker

worker = Worker(queues=["conv"], concurrency=4)
worker.cancels.every_s = 0.25  # a cancelled run stops within about half a second


def _log(ctx: TaskContext, event: str, **extra: object) -> None:
    line = {"event": event, "task_id": ctx.task_id, "handler": ctx.handler,
            "at_ms": time.time_ns() // 1_000_000, **extra}  # fmt: skip
    with open(os.environ["TIKK_E2E_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class Logged(RunHooks):
    """Every run's start and end in the log, from middleware rather than each handler."""

    async def before(self, ctx: TaskContext) -> None:
        _log(ctx, "start")

    async def finally_(self, ctx: TaskContext) -> None:
        _log(ctx, "end", cancelled=ctx.cancel_reason)


worker.middleware.append(Logged())


@dataclass(frozen=True)
class Invoice:
    customer: str
    cents: int


@dataclass(frozen=True)
class Paid:
    customer: str
    total: int


@worker.handler("pay")
async def pay(ctx: TaskContext, invoice: Invoice) -> Paid:
    return Paid(invoice.customer, invoice.cents * 2)


@worker.handler("hang", timeout_s=0.5)
async def hang(ctx: TaskContext, payload: bytes) -> None:
    await asyncio.sleep(60)


@worker.handler("slow", concurrency=2)
async def slow(ctx: TaskContext, payload: bytes) -> None:
    await asyncio.sleep(2)


@worker.handler("fast")
async def fast(ctx: TaskContext, payload: bytes) -> None:
    return None


@worker.handler("long_async")
async def long_async(ctx: TaskContext, payload: bytes) -> None:
    await asyncio.sleep(120)


@worker.handler("long_thread")
def long_thread(ctx: TaskContext, payload: bytes) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ctx.raise_if_cancelled()
        time.sleep(0.02)
