"""The demo's worker: a typed handler that succeeds, one that fails twice, one that always
fails, and a middleware that logs every run."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from worker_sdk import RunHooks, TaskContext, Worker

log = logging.getLogger("demo.worker")


@dataclass(frozen=True)
class Greeting:
    """The payload of ``greet``: JSON ``{"name": ...}``, checked before the handler runs."""

    name: str = "world"


class RunLog(RunHooks):
    """Middleware: a line per failed run, written once here rather than in every handler."""

    async def on_error(self, ctx: TaskContext, error: BaseException) -> None:
        log.info("%s attempt %d failed: %s", ctx.task_id, ctx.attempt, error)


worker = Worker(queues=["demo"], concurrency=8, middleware=[RunLog()])


@worker.handler("greet", timeout_s=10)
async def greet(ctx: TaskContext, payload: Greeting) -> str:
    return f"hello, {payload.name}"


@worker.handler("flaky", timeout_s=10)
def flaky(ctx: TaskContext, payload: bytes) -> bytes:
    """A plain function (runs in the thread pool) that fails on its first two attempts."""
    if ctx.attempt < 3:
        raise ConnectionError(f"upstream not ready (attempt {ctx.attempt})")
    return b"finally"


@worker.handler("broken")
async def broken(ctx: TaskContext, payload: bytes) -> bytes:
    raise ValueError("this task can never succeed")
