"""The demo's worker: one handler that succeeds, one that fails twice, one that always fails."""

from __future__ import annotations

import json

from worker_sdk import TaskContext, Worker

worker = Worker(queues=["demo"], concurrency=8)


@worker.handler("greet")
async def greet(ctx: TaskContext, payload: bytes) -> bytes:
    name = json.loads(payload or b"{}").get("name", "world")
    return f"hello, {name}".encode()


@worker.handler("flaky")
def flaky(ctx: TaskContext, payload: bytes) -> bytes:
    """A plain function (runs in the thread pool) that fails on its first two attempts."""
    if ctx.attempt < 3:
        raise ConnectionError(f"upstream not ready (attempt {ctx.attempt})")
    return b"finally"


@worker.handler("broken")
async def broken(ctx: TaskContext, payload: bytes) -> bytes:
    raise ValueError("this task can never succeed")
