"""Celery with a Redis broker: one worker ``--pool prefork --concurrency 8``, tasks sent with
``apply_async(eta=...)``. The worker takes ETA tasks off the broker at once and holds them
in memory until they are due (Celery's way of running a task at a time).

``celery -A devtools.peers.celery_peer:app worker`` loads ``app``: the broker is the run's
``redis-server`` (``$TIKK_PEERS_REDIS_URL``). Needs the ``peers`` extra: imported only when
Celery was asked for.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devtools.peers.processes import PeerFleet, python_argv
from devtools.peers.records import RECORDS_ENV, record
from devtools.peers.redis_server import REDIS_URL_ENV, start_redis
from devtools.peers.workloads import TaskPlan

CELERY_TASK = "bench_peers.noop"
CELERY_QUEUE = "bench-peers"
CELERY_READY = "ready-celery"
CELERY_START_TIMEOUT_S = 90.0


def make_app(broker_url: str) -> Any:
    """A Celery app on ``broker_url`` with the no-op task; results are not kept."""
    from celery import Celery

    app = Celery("bench_peers", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=CELERY_QUEUE, task_ignore_result=True,
        broker_connection_retry_on_startup=True, enable_utc=True,
    )  # fmt: skip
    app.task(name=CELERY_TASK, ignore_result=True)(record)
    return app


def _mark_ready(**_: Any) -> None:
    (Path(os.environ[RECORDS_ENV]) / CELERY_READY).touch()


def _worker_app() -> Any:
    from celery.signals import worker_ready

    worker_ready.connect(_mark_ready, weak=False)
    return make_app(os.environ.get(REDIS_URL_ENV, "redis://127.0.0.1:6379/0"))


app = _worker_app()


class CeleryPeer:
    """A ``redis-server``, a Celery worker, and a producer in the runner."""

    name = "celery"
    expected_ingest_per_s = 700.0

    def __init__(self) -> None:
        self._app: Any = None

    def start(self, fleet: PeerFleet) -> None:
        url = start_redis(fleet)
        fleet.set_env(REDIS_URL_ENV, url)
        argv = python_argv(
            "-m", "celery", "-A", "devtools.peers.celery_peer:app", "worker",
            "--pool", "prefork", "--concurrency", "8", "-Q", CELERY_QUEUE,
            "--loglevel", "WARNING", "--hostname", "bench-peers@%h",
        )  # fmt: skip
        fleet.launch("celery-worker", "worker", argv)
        fleet.wait_file(fleet.records / CELERY_READY, "celery worker", CELERY_START_TIMEOUT_S)
        self._app = make_app(url)

    def submit(self, plan: TaskPlan) -> float:
        task = self._app.tasks[CELERY_TASK]
        began = time.monotonic()
        for i in range(plan.tasks):
            due = plan.due_ms(i)
            eta = datetime.fromtimestamp(due / 1000, UTC)
            task.apply_async((plan.task_id(i), due), eta=eta)
        return time.monotonic() - began

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
            self._app = None
