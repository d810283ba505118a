"""arq: one worker (``max_jobs`` 64, ``poll_delay`` 0.025 s) on the run's ``redis-server``;
jobs enqueued with ``_defer_until`` (arq's way of running a job at a time), under the task's
id as the job id.

``arq devtools.peers.arq_peer.WorkerSettings`` loads the worker's settings; the Redis URL is
``$TIKK_PEERS_REDIS_URL``. arq logs every job at INFO by default: the worker logs warnings
only, as the other systems do. Needs the ``peers`` extra: imported only when arq was asked
for.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from arq.connections import RedisSettings

from devtools.peers.processes import PeerFleet, python_argv
from devtools.peers.records import RECORDS_ENV, record
from devtools.peers.redis_server import REDIS_URL_ENV, start_redis
from devtools.peers.workloads import TaskPlan

ARQ_READY = "ready-arq"
ARQ_START_TIMEOUT_S = 60.0
# Jobs enqueued concurrently by the producer.
ENQUEUE_CONCURRENCY = 100
QUIET_LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}


async def noop(ctx: dict[str, Any], task_id: str, due_ms: int) -> None:
    record(task_id, due_ms)


async def _mark_ready(ctx: dict[str, Any]) -> None:
    (Path(os.environ[RECORDS_ENV]) / ARQ_READY).touch()


class WorkerSettings:
    """The worker's settings, as ``arq`` reads them."""

    functions = [noop]
    redis_settings = RedisSettings.from_dsn(os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1"))
    max_jobs = 64
    poll_delay = 0.025
    on_startup = _mark_ready


class ArqPeer:
    """A ``redis-server``, an arq worker, and a producer in the runner."""

    name = "arq"
    expected_ingest_per_s = 3_000.0

    def __init__(self) -> None:
        self._url = ""

    def start(self, fleet: PeerFleet) -> None:
        self._url = start_redis(fleet)
        fleet.set_env(REDIS_URL_ENV, self._url)
        argv = python_argv(
            "-m", "arq", "devtools.peers.arq_peer.WorkerSettings",
            "--custom-log-dict", "devtools.peers.arq_peer.QUIET_LOGGING",
        )  # fmt: skip
        fleet.launch("arq-worker", "worker", argv)
        fleet.wait_file(fleet.records / ARQ_READY, "arq worker", ARQ_START_TIMEOUT_S)

    def submit(self, plan: TaskPlan) -> float:
        return asyncio.run(_enqueue(self._url, plan))

    def close(self) -> None:
        """Nothing to release: each submit closes its own pool."""


async def _enqueue(url: str, plan: TaskPlan) -> float:
    from arq import create_pool

    pool = await create_pool(RedisSettings.from_dsn(url))
    try:
        began = time.monotonic()
        for first in range(0, plan.tasks, ENQUEUE_CONCURRENCY):
            indices = range(first, min(plan.tasks, first + ENQUEUE_CONCURRENCY))
            jobs = await asyncio.gather(*(_enqueue_one(pool, plan, i) for i in indices))
            if any(job is None for job in jobs):
                raise RuntimeError("arq refused a job: its id was taken")
        return time.monotonic() - began
    finally:
        await pool.aclose()


async def _enqueue_one(pool: Any, plan: TaskPlan, index: int) -> Any:
    due = plan.due_ms(index)
    task_id = plan.task_id(index)
    return await pool.enqueue_job(
        "noop", task_id, due, _job_id=task_id,
        _defer_until=datetime.fromtimestamp(due / 1000, UTC),
    )  # fmt: skip
