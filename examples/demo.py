"""The tikk demo on the embedded default.

Starts ``tikk dev`` with the example worker (``examples/demo_worker.py``), schedules a few
dozen tasks over the next ~10 seconds (one fails twice then succeeds, one always fails),
prints every run as it happens with its lateness, then the run history and the dead letters.
Exits 0 when every task reached its final state as expected.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import grpc

from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import (
    history_pb2,
    history_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
)

ROOT = Path(__file__).resolve().parents[1]
FINAL = {tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_DEAD_LETTERED}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def start_dev(data_dir: str) -> tuple[subprocess.Popen[str], str, str]:
    """``tikk dev`` with the demo worker: the process, its address and its console's URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.cli",
            "dev",
            "--data-dir",
            data_dir,
            "--listen",
            "127.0.0.1:0",
            "--worker",
            "examples.demo_worker:worker",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    address = ""
    for line in proc.stdout:
        print(f"  | {line.rstrip()}")
        if m := re.search(r"listening on ([\d.]+:\d+)", line):
            address = m.group(1)
        if address and (m := re.search(r"console (\S+)", line)):  # the banner's last line
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return proc, address, m.group(1)
    raise SystemExit("tikk dev exited before it was ready")


def _drain(out: IO[str]) -> None:
    """Keep reading the server's output, so that it never blocks on a full pipe."""
    for _ in out:
        pass


def schedule(tasks: tasks_pb2_grpc.TaskServiceStub) -> dict[str, int]:
    """A bulk load through the streaming RPC; returns task id → due time (ms)."""
    start = now_ms() + 1_000
    quick = tasks_pb2.RetryPolicy(
        max_attempts=3, initial_backoff=to_duration(500), multiplier=2.0, jitter=0.2
    )
    items, dues = [], {}
    for i in range(30):
        due = start + i * 300
        items.append(
            tasks_pb2.CreateTaskRequest(
                task_id=f"greet-{i:02d}",
                queue="demo",
                handler="greet",
                run_at=to_timestamp(due),
                payload=json.dumps({"name": f"user {i}"}).encode(),
            )
        )
        dues[f"greet-{i:02d}"] = due
    for task_id, handler, due in [
        ("flaky", "flaky", start + 2_000),
        ("broken", "broken", start + 3_000),
    ]:
        items.append(
            tasks_pb2.CreateTaskRequest(
                task_id=task_id,
                queue="demo",
                handler=handler,
                run_at=to_timestamp(due),
                retry_policy=quick,
            )
        )
        dues[task_id] = due
    resp = tasks.CreateTasks(iter([tasks_pb2.CreateTasksRequest(tasks=items)]), timeout=30)
    print(
        f"scheduled {resp.accepted} tasks ({resp.rejected} rejected) over the next "
        f"{(max(dues.values()) - now_ms()) / 1000:.1f} s\n"
    )
    return dues


def every_5_seconds(channel: grpc.Channel) -> None:
    """A recurring schedule beside the one-off tasks: a greeting every 5 s, Oslo time."""
    schedules = schedules_pb2_grpc.ScheduleServiceStub(channel)
    spec = schedules_pb2.ScheduleSpec(cron="*/5 * * * * *", timezone="Europe/Oslo")
    heartbeat = schedules_pb2.Schedule(
        id="heartbeat", spec=spec, queue="demo", handler="greet",
        payload=json.dumps({"name": "heartbeat"}).encode(),
    )  # fmt: skip
    schedules.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=heartbeat), timeout=30)
    print("schedule 'heartbeat' fires every 5 s (its runs appear below too)")


def status_name(status: int) -> str:
    return history_pb2.RunStatus.Name(status).removeprefix("RUN_STATUS_").lower()


def fmt_run(r: history_pb2.Run) -> str:
    late = r.start_time.ToMilliseconds() - r.due_time.ToMilliseconds()
    clock = time.strftime("%H:%M:%S", time.gmtime(r.start_time.seconds))
    ms = r.start_time.ToMilliseconds() % 1000
    line = (
        f"{clock}.{ms:03d}  {r.task_id:<9} attempt {r.attempt}  {status_name(r.status):<13}"
        f" lateness {late:>4} ms"
    )
    return line + (f"  {r.error_type}: {r.error_message}" if r.error_type else "")


def follow(
    history: history_pb2_grpc.HistoryServiceStub,
    tasks: tasks_pb2_grpc.TaskServiceStub,
    dues: dict[str, int],
    since: int,
) -> list[history_pb2.Run]:
    """Print runs as they are recorded until every task is final (or 60 s pass)."""
    seen: dict[str, history_pb2.Run] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        req = history_pb2.ListRunsRequest(
            queue="demo", start_time=to_timestamp(since), page_size=1000
        )
        fresh = [r for r in history.ListRuns(req, timeout=10).runs if r.run_id not in seen]
        for r in sorted(fresh, key=lambda r: r.start_time.ToMilliseconds()):
            seen[r.run_id] = r
            print(fmt_run(r))
        states = [
            tasks.GetTask(tasks_pb2.GetTaskRequest(task_id=t), timeout=10).state
            for t in ("flaky", "broken")
        ]
        ran = {r.task_id for r in seen.values() if r.task_id in dues}
        if len(ran) == len(dues) and set(states) <= FINAL:
            return list(seen.values())
        time.sleep(0.2)
    raise SystemExit("demo: not every task finished within 60 s")


def report(runs: list[history_pb2.Run], history: history_pb2_grpc.HistoryServiceStub) -> bool:
    lateness = sorted(r.start_time.ToMilliseconds() - r.due_time.ToMilliseconds() for r in runs)
    print(
        f"\n{len(runs)} runs; lateness due → handler start: min {lateness[0]} ms, "
        f"median {lateness[len(lateness) // 2]} ms, max {lateness[-1]} ms"
    )
    ok = all(0 <= x < 1_000 for x in lateness)
    for task_id in ("flaky", "broken"):
        print(f"\nrun history of {task_id!r} (newest first):")
        page = history.ListTaskRuns(history_pb2.ListTaskRunsRequest(task_id=task_id), timeout=10)
        for r in page.runs:
            print("  " + fmt_run(r))
    dead = history.ListDeadLetters(history_pb2.ListDeadLettersRequest(queue="demo"), timeout=10)
    print("\ndead letters:")
    for t in dead.tasks:
        print(f"  {t.id}  after {t.attempt} attempts  {t.last_error_type}: {t.last_error_message}")
    flaky = [r.status for r in runs if r.task_id == "flaky"]
    ok &= sorted(flaky) == sorted(
        [history_pb2.RUN_STATUS_FAILED] * 2 + [history_pb2.RUN_STATUS_SUCCEEDED]
    )
    ok &= [t.id for t in dead.tasks] == ["broken"]
    return ok


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tikk-demo-") as data_dir:
        proc, address, console = start_dev(data_dir)
        try:
            with grpc.insecure_channel(address) as channel:
                tasks = tasks_pb2_grpc.TaskServiceStub(channel)
                history = history_pb2_grpc.HistoryServiceStub(channel)
                since = now_ms()
                every_5_seconds(channel)
                dues = schedule(tasks)
                ok = report(follow(history, tasks, dues, since), history)
            print(f"\nthe console shows these runs, the dead letter and the schedule: {console}")
            if sys.stdin.isatty():
                input("press Enter to stop tikk dev ")
        finally:
            proc.terminate()
            proc.wait(30)
    print("\ndemo " + ("finished: every task fired on time" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
