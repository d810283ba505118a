"""One run of one workload on one system, on a fresh instance of it, measured:

1. **start**: the system's processes (and its own ``redis-server``), until they take tasks;
2. **ingest**: every task created the system's way, due from a lead time on (the time
   creating them should take, and a few seconds), or tomorrow for a holding workload;
3. **fire**: the handlers' records read until every task started once, or a deadline passed
   (a holding workload is held for ``HOLD_S`` instead);

then the processes are stopped, whatever happened. CPU is that of every process of the
system from the end of start to the end of the run; memory the largest sum of their resident
sets sampled twice a second (``devtools.peers.processes``). A measurement: nothing asserts.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from devtools.peers.processes import PeerFleet
from devtools.peers.records import RECORDS_ENV, RecordsFolder, Starts, outcome_of
from devtools.peers.system import PeerSystem
from devtools.peers.workloads import TaskPlan, Workload, plan_for
from devtools.proc_stats import ProcSample

SETTLE_S = 2.0  # after start, before measuring: workers connect, imports finish
HOLD_S = 10.0  # a holding workload is sampled this long after its tasks went in
LEAD_FLOOR_MS, LEAD_MARGIN = 3_000, 1.4
GRACE_S, GRACE_PER_TASK_S = 30.0, 0.004  # after the last due time, before the rest is lost
STALL_S = 20.0  # no start for this long after the last due time: the rest is lost
DUPLICATE_WAIT_S = 1.5  # after the last first start: late duplicates still count


def make_system(name: str) -> PeerSystem:
    """The system called ``name``; a peer's library is imported here, when asked for."""
    if name == "tikk":
        from devtools.peers.tikk_peer import TikkEmbedded

        return TikkEmbedded()
    if name == "celery":
        from devtools.peers.celery_peer import CeleryPeer

        return CeleryPeer()
    if name == "arq":
        from devtools.peers.arq_peer import ArqPeer

        return ArqPeer()
    if name == "apscheduler":
        from devtools.peers.apscheduler_peer import APSchedulerPeer

        return APSchedulerPeer()
    from devtools.peers.redis_poller import RedisPoller

    return RedisPoller()


def run_once(name: str, workload: Workload, run: int, ingest_per_s: float | None) -> dict[str, Any]:
    """One run; its figures, or ``error`` with what failed."""
    described = {"system": name, "workload": workload.name, "run": run, "tasks": workload.tasks}
    with tempfile.TemporaryDirectory(prefix=f"tikk-peers-{name}-") as tmp:
        work = Path(tmp)
        (work / "records").mkdir()
        env = {**os.environ, RECORDS_ENV: str(work / "records"), "PYTHONUNBUFFERED": "1",
               "TIKK_BENCH_OUT": str(work / "records" / "runs-tikk.txt")}  # fmt: skip
        fleet = PeerFleet(work, env, work / "records")
        system: PeerSystem | None = None
        try:
            system = make_system(name)
            system.start(fleet)
            time.sleep(SETTLE_S)
            with fleet.watching():
                figures = _measure(system, fleet, workload, run, ingest_per_s)
        except Exception as exc:  # a failed system is reported as such; the others go on
            return {**described, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            try:
                if system is not None:
                    system.close()
            finally:
                fleet.stop()
    return {**described, **figures}


def lead_ms(workload: Workload, expected_per_s: float) -> int:
    """How long after now the first task is due: creating them all should be over by then."""
    return LEAD_FLOOR_MS + int(workload.tasks / expected_per_s * 1000 * LEAD_MARGIN)


def _measure(
    system: PeerSystem, fleet: PeerFleet, workload: Workload, run: int, ingest_per_s: float | None
) -> dict[str, Any]:
    before = fleet.sample()
    lead = lead_ms(workload, ingest_per_s or system.expected_ingest_per_s)
    plan = plan_for(workload, f"{workload.name}{run}-", _now_ms(), lead)
    seconds = system.submit(plan)
    ingest_end_ms = _now_ms()
    fleet.check_alive()
    records = RecordsFolder(fleet.records)
    starts = _hold(fleet, records) if workload.held else _collect(fleet, records, plan)
    after = fleet.sample()
    cpu = _cpu_between(before, after)
    outcome = outcome_of(starts, 0 if workload.held else plan.tasks)
    return {
        "lead_ms": lead, "ingest_s": round(seconds, 3),
        "ingest_per_s": round(plan.tasks / seconds, 1) if seconds > 0 else None,
        "ingest_overran": ingest_end_ms > plan.spread.first_due_ms,
        **asdict(outcome), "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(fleet.total_peak_bytes / 2**20, 1),
        "processes": {m.name: m.role for m in fleet.members},
    }  # fmt: skip


def _cpu_between(
    before: dict[str, ProcSample | None], after: dict[str, ProcSample | None]
) -> float:
    """CPU seconds all processes used between two samples (each tree's, reaped children
    included)."""
    total = 0.0
    for name, last in after.items():
        first = before.get(name)
        if first is not None and last is not None:
            total += last.cpu_s - first.cpu_s
    return total


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _hold(fleet: PeerFleet, records: RecordsFolder) -> Starts:
    """Hold the tasks due tomorrow while memory is sampled; what started anyway (early)."""
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        time.sleep(0.5)
        fleet.check_alive()
    return records.read_new()


def _collect(fleet: PeerFleet, records: RecordsFolder, plan: TaskPlan) -> Starts:
    """Read the starts until every task started, or the deadline, or a stall after the last
    due time; then a little longer for duplicates."""
    last_due_s = plan.last_due_ms / 1000
    deadline = last_due_s + GRACE_S + plan.tasks * GRACE_PER_TASK_S
    seen, progress_at = 0, time.time()
    while time.time() < deadline:
        time.sleep(0.25)
        fleet.check_alive()
        starts = records.read_new()
        if starts.distinct >= plan.tasks:
            break
        if starts.distinct > seen:
            seen, progress_at = starts.distinct, time.time()
        elif time.time() > max(last_due_s, progress_at) + STALL_S:
            break
    time.sleep(DUPLICATE_WAIT_S)
    return records.read_new()
