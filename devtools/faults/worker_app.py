"""The workers of the fault suite, run as real processes:
``tikk worker devtools.faults.worker_app:worker --server HOST:PORT``.

Every handler start is appended, before the handler does anything else, as one JSON line
(``records.Start``) to the file named by ``TIKK_FAULTS_LOG``. Each line is one ``write`` on a
file opened for appending, so lines of concurrent workers do not interleave; a ``kill -9``
can at worst cut a worker's last line short, which the reader skips.
"""

from __future__ import annotations

import os
import time

from devtools.faults.records import Start, TaskKind
from worker_sdk import TaskContext, Worker

QUEUE = "faults"
LOG_ENV = "TIKK_FAULTS_LOG"

worker = Worker(queues=[QUEUE], concurrency=32)


def _ms(ctx_time: float) -> int:
    return round(ctx_time * 1000)


def log_start(ctx: TaskContext) -> None:
    """Append this start to the log named by ``TIKK_FAULTS_LOG``."""
    start = Start(
        task_id=ctx.task_id,
        attempt=ctx.attempt,
        key=ctx.idempotency_key,
        due_ms=_ms(ctx.due_time.timestamp()),
        fired_ms=_ms(ctx.fired_time.timestamp()),
        started_ms=time.time_ns() // 1_000_000,
        worker=ctx.worker_id,
    )
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (start.to_json() + "\n").encode())
    finally:
        os.close(fd)


@worker.handler(TaskKind.OK.handler)
async def ok(ctx: TaskContext, payload: bytes) -> bytes:
    log_start(ctx)
    return b"ok"


@worker.handler(TaskKind.FAIL_ONCE.handler)
async def fail_once(ctx: TaskContext, payload: bytes) -> bytes:
    """Fails its first attempt, succeeds from the second on."""
    log_start(ctx)
    if ctx.attempt == 1:
        raise ConnectionError("first attempt fails on purpose")
    return b"recovered"


@worker.handler(TaskKind.ALWAYS_FAIL.handler)
async def always_fail(ctx: TaskContext, payload: bytes) -> bytes:
    log_start(ctx)
    raise ValueError("fails on every attempt on purpose")
