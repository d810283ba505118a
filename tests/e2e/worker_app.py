"""The worker that end-to-end tests run as a real process (``tikk worker``).

Every execution is appended as one JSON line to the file named by ``TIKK_E2E_LOG``, so tests
can count how often each task really ran, independently of the server's history.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from worker_sdk import NonRetryableError, Retry, TaskContext, Worker

worker = Worker(queues=["e2e"], concurrency=32)


def _log(ctx: TaskContext, event: str) -> None:
    line = {
        "event": event,
        "namespace": ctx.namespace,
        "task_id": ctx.task_id,
        "attempt": ctx.attempt,
        "key": ctx.idempotency_key,
        "started_ms": time.time_ns() // 1_000_000,
        "due_ms": int(ctx.due_time.timestamp() * 1000),
        "fired_ms": int(ctx.fired_time.timestamp() * 1000),
        "worker": ctx.worker_id,
        "run_id": ctx.run_id,
    }
    with open(os.environ["TIKK_E2E_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


@worker.handler("record")
async def record(ctx: TaskContext, payload: bytes) -> bytes:
    _log(ctx, "start")
    return b"ok:" + payload


@worker.handler("flaky")
def flaky(ctx: TaskContext, payload: bytes) -> bytes:
    """Fails until attempt number ``payload``."""
    _log(ctx, "start")
    if ctx.attempt < int(payload):
        raise ConnectionError(f"attempt {ctx.attempt} fails")
    return b"recovered"


@worker.handler("fail_first_run")
def fail_first_run(ctx: TaskContext, payload: bytes) -> bytes:
    """Fails the first time its task runs and succeeds after (a re-drive runs it again)."""
    log = Path(os.environ["TIKK_E2E_LOG"])
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    earlier = any(json.loads(line)["task_id"] == ctx.task_id for line in lines)
    _log(ctx, "start")
    if not earlier:
        raise ValueError("the first run of this task fails")
    return b"ok"


@worker.handler("always_fail")
async def always_fail(ctx: TaskContext, payload: bytes) -> bytes:
    _log(ctx, "start")
    raise ValueError("never works")


@worker.handler("retry_later")
async def retry_later(ctx: TaskContext, payload: bytes) -> bytes:
    _log(ctx, "start")
    if ctx.attempt == 1:
        raise Retry(after=0.5, reason="not yet")
    return b"later"


@worker.handler("reject")
async def reject(ctx: TaskContext, payload: bytes) -> bytes:
    _log(ctx, "start")
    raise NonRetryableError("payload can never be processed")


@worker.handler("slow")
async def slow(ctx: TaskContext, payload: bytes) -> bytes:
    _log(ctx, "start")
    await asyncio.sleep(float(payload))  # a run that takes as many seconds as it is told
    _log(ctx, "end")
    return b"slept"
