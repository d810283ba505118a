"""APScheduler 3: a scheduler process (``BackgroundScheduler``, its default thread pool
executor) on a ``SQLAlchemyJobStore`` over a SQLite file, running ``date`` trigger jobs.

APScheduler 3 notices only the jobs its own process adds (a job store shared between
processes is not supported), so the scheduler process adds them itself: the runner writes
the plan to a file, the process adds every job through ``add_job`` and reports the seconds
that took. Jobs run however late (``misfire_grace_time`` None): lateness is measured, not
turned into skipped runs. ``python -m devtools.peers.apscheduler_peer FOLDER`` runs the
process. Needs the ``peers`` extra.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devtools.bench_load import Spread
from devtools.peers.processes import PeerFleet, python_argv
from devtools.peers.workloads import TaskPlan

JOB_FUNCTION = "devtools.peers.records:record"
PLAN_FILE, READY_FILE, ADDED_FILE = "plan.json", "ready", "added"
APSCHEDULER_START_TIMEOUT_S = 60.0
# Seconds allowed for adding the jobs: a floor, and per job.
ADD_TIMEOUT_S, ADD_TIMEOUT_PER_JOB_S = 120.0, 0.02


class APSchedulerPeer:
    """The scheduler process; the runner hands it the plan through its folder."""

    name = "apscheduler"
    expected_ingest_per_s = 250.0

    def __init__(self) -> None:
        self._folder = Path()
        self._fleet: PeerFleet | None = None

    def start(self, fleet: PeerFleet) -> None:
        self._folder = fleet.work / "apscheduler"
        self._folder.mkdir()
        self._fleet = fleet
        argv = python_argv("-m", "devtools.peers.apscheduler_peer", str(self._folder))
        fleet.launch("apscheduler", "scheduler", argv)
        fleet.wait_file(self._folder / READY_FILE, "apscheduler", APSCHEDULER_START_TIMEOUT_S)

    def submit(self, plan: TaskPlan) -> float:
        assert self._fleet is not None, "submit before start"
        spread = plan.spread
        text = json.dumps({"prefix": plan.prefix, "tasks": plan.tasks,
                           "first_due_ms": spread.first_due_ms, "rate": spread.rate})  # fmt: skip
        (self._folder / "plan.tmp").write_text(text)
        (self._folder / "plan.tmp").rename(self._folder / PLAN_FILE)  # whole, at once
        timeout = ADD_TIMEOUT_S + plan.tasks * ADD_TIMEOUT_PER_JOB_S
        self._fleet.wait_file(self._folder / ADDED_FILE, "apscheduler adding jobs", timeout)
        return float((self._folder / ADDED_FILE).read_text())

    def close(self) -> None:
        """Nothing to release: the runner holds no connection to the scheduler."""


def _scheduler(db: Path) -> Any:
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db}")},
        job_defaults={"misfire_grace_time": None, "coalesce": False}, timezone=UTC,
    )  # fmt: skip


def _read_plan(folder: Path, stop: threading.Event) -> TaskPlan | None:
    while not (folder / PLAN_FILE).exists():
        if stop.wait(0.05):
            return None
    raw = json.loads((folder / PLAN_FILE).read_text())
    return TaskPlan(raw["prefix"], raw["tasks"], Spread(raw["first_due_ms"], raw["rate"]))


def _add_jobs(scheduler: Any, plan: TaskPlan) -> float:
    began = time.monotonic()
    for i in range(plan.tasks):
        task_id, due = plan.task_id(i), plan.due_ms(i)
        scheduler.add_job(
            JOB_FUNCTION, trigger="date", run_date=datetime.fromtimestamp(due / 1000, UTC),
            args=(task_id, due), id=task_id,
        )  # fmt: skip
    return time.monotonic() - began


def serve(folder: Path) -> None:
    """The scheduler process: start, take the plan, add its jobs, run them until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler = _scheduler(folder / "jobs.sqlite")
    scheduler.start()
    try:
        (folder / READY_FILE).touch()
        plan = _read_plan(folder, stop)
        if plan is not None:
            seconds = _add_jobs(scheduler, plan)
            (folder / "added.tmp").write_text(f"{seconds:.6f}")
            (folder / "added.tmp").rename(folder / ADDED_FILE)
            stop.wait()
    finally:
        scheduler.shutdown(wait=False)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
