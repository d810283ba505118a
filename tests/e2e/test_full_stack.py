"""End to end on the production stack: Cassandra, Kafka and ZooKeeper (``python -m devtools
stack up``) with separate processes: one server, two dispatchers, two workers."""

from __future__ import annotations

import itertools
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.conftest import EARLIEST_MS, Process, read_executions
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, require, with_login
from tests.waiting import eventually
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import (
    history_pb2,
    history_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
)

# Each test waits minutes at most for the stack (its own bounds say how long).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
SHARDS = "32"
SESSION_TIMEOUT_S = 4
NS = "full"


class FullStack:
    def __init__(self, tmp: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.keyspace = f"tikk_e2e_{tag}"
        self.backend = [
            "--store",
            with_login(f"cassandra://{CASSANDRA}/{self.keyspace}"),
            "--history",
            with_login(f"cassandra://{CASSANDRA}/{self.keyspace}"),
            "--queue",
            with_login(f"kafka://{KAFKA}?prefix=e2e{tag}.&partitions=4"),
            "--ownership",
            with_login(f"zk://{ZOOKEEPER}/tikk-e2e-{tag}"),
            "--session-timeout",
            f"{SESSION_TIMEOUT_S}s",
            "--shards",
            SHARDS,
        ]
        self.log = tmp / "executions.jsonl"
        # The server checks the delivery tokens the dispatchers sign: one keys file for all.
        keys = str(tmp / "delivery-keys")
        self.env = {
            "TIKK_E2E_LOG": str(self.log),
            "PYTHONUNBUFFERED": "1",
            "TIKK_DELIVERY_KEYS": keys,
        }
        self.processes: list[Process] = []
        self.address = ""

    def start(self) -> None:
        migrate = Process(["migrate", *self.backend], self.env)
        assert migrate.proc.wait(120) == 0, migrate.output()
        server = self.spawn(["server", *self.backend, "--listen", "127.0.0.1:0"])
        port = server.wait_for(re.compile(r"listening on [\d.]+:(\d+)"), timeout=60).group(1)
        self.address = f"127.0.0.1:{port}"
        self.dispatchers = [self.spawn(["dispatcher", *self.backend]) for _ in range(2)]
        for d in self.dispatchers:
            d.wait_for(re.compile("dispatcher running"), timeout=60)
        self.workers = [self.worker() for _ in range(2)]
        self.channel = grpc.insecure_channel(self.address)
        self.tasks: Any = tasks_pb2_grpc.TaskServiceStub(self.channel)
        self.history: Any = history_pb2_grpc.HistoryServiceStub(self.channel)

    def spawn(self, args: list[str]) -> Process:
        p = Process(args, self.env)
        self.processes.append(p)
        return p

    def worker(self) -> Process:
        return self.spawn(["worker", "tests.e2e.worker_app:worker", "--server", self.address])

    def executions(self) -> list[dict[str, Any]]:
        return read_executions(self.log)

    def close(self) -> None:
        self.channel.close()
        for p in reversed(self.processes):
            p.stop()


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FullStack]:
    for name, address in (("cassandra", CASSANDRA), ("kafka", KAFKA), ("zookeeper", ZOOKEEPER)):
        require(name, address)
    stack = FullStack(tmp_path_factory.mktemp("full"))
    stack.start()
    yield stack
    stack.close()


def load(full: FullStack, due_times: list[int]) -> dict[str, int]:
    """Bulk-load tasks with server-assigned ids; returns id → due time."""
    items = [
        tasks_pb2.CreateTaskRequest(
            namespace=NS, queue="e2e", handler="record", run_at=to_timestamp(due)
        )
        for due in due_times
    ]
    chunks = [
        tasks_pb2.CreateTasksRequest(tasks=items[i : i + 500]) for i in range(0, len(items), 500)
    ]
    resp = full.tasks.CreateTasks(iter(chunks), timeout=300)
    assert (resp.accepted, resp.rejected) == (len(due_times), 0)
    return {r.task_id: due_times[r.index] for r in resp.results}


@pytest.mark.timeout(600)  # a minute of fires, then up to 4 minutes for the last to run
def test_ten_thousand_tasks_fire_on_time_through_a_dispatcher_kill(full: FullStack) -> None:
    start = time.time_ns() // 1_000_000 + 20_000
    t0 = time.monotonic()
    dues = load(full, [start + i * 6 for i in range(10_000)])  # 60 s of fires
    print(f"ingested {len(dues)} tasks in {time.monotonic() - t0:.1f} s")
    # A third into the run, kill -9 a dispatcher that owns shards.
    eventually(lambda: time.time_ns() // 1_000_000 > start + 20_000, timeout=120, every=0.5)
    killed_at = time.time_ns() // 1_000_000
    full.dispatchers[0].kill9()
    eventually(lambda: dues.keys() <= _ran(full), timeout=240, every=1.0)
    mine = [e for e in full.executions() if e["namespace"] == NS and e["task_id"] in dues]
    early = [e for e in mine if e["started_ms"] < dues[e["task_id"]]]
    assert early == []
    first_start, first_fired = _earliest(mine, "started_ms"), _earliest(mine, "fired_ms")
    started = sorted(first_start[t] - due for t, due in dues.items())
    fired = sorted(first_fired[t] - due for t, due in dues.items())
    runs = Counter(e["task_id"] for e in mine)
    duplicates = sum(n - 1 for n in runs.values())
    for name, values in (("handed to queue", fired), ("handler start", started)):
        print(
            f"lateness due → {name}: p50 {values[len(values) // 2]} ms,"
            f" p99 {values[int(len(values) * 0.99)]} ms, max {values[-1]} ms"
        )
    print(f"duplicate deliveries: {duplicates} of {len(dues)}")
    assert min(fired) >= -EARLIEST_MS  # handed over up to the lead early, started at due
    # The kill delays dispatching of the dead owner's shards by at most the session timeout
    # plus 5 s. (Handler start adds the workers' own backlog, reported above, which the
    # failover does not cause.)
    after_kill = [first_fired[t] - due for t, due in dues.items() if due >= killed_at]
    assert max(after_kill) <= (SESSION_TIMEOUT_S + 5) * 1000


def _ran(full: FullStack) -> set[str]:
    """The tasks of this module's namespace that started at least once."""
    return {e["task_id"] for e in full.executions() if e["namespace"] == NS}


def _earliest(executions: list[dict[str, Any]], field: str) -> dict[str, int]:
    """task id -> the earliest ``field`` (a time in ms) among its executions."""
    first: dict[str, int] = {}
    for e in executions:
        first[e["task_id"]] = min(first.get(e["task_id"], 2**62), e[field])
    return first


def test_worker_killed_mid_task_is_redelivered_and_completed(full: FullStack) -> None:
    req = tasks_pb2.CreateTaskRequest(
        namespace=NS, task_id="slow-kill", queue="e2e", handler="slow", payload=b"5"
    )
    full.tasks.CreateTask(req, timeout=30)
    started = eventually(
        lambda: [e for e in full.executions() if e["task_id"] == "slow-kill"], timeout=60
    )
    victim = next(w for w in full.workers if str(w.proc.pid) in started[0]["worker"])
    victim.kill9()
    get = tasks_pb2.GetTaskRequest(namespace=NS, task_id="slow-kill")
    eventually(
        lambda: full.tasks.GetTask(get, timeout=30).state == tasks_pb2.TASK_STATE_SUCCEEDED,
        timeout=120,
        every=0.5,
    )
    starts = [e for e in full.executions() if e["task_id"] == "slow-kill" and e["event"] == "start"]
    assert len(starts) >= 2
    assert len({e["key"] for e in starts}) == 1
    print(f"deliveries of the killed task: {len(starts)}")


def _schedule_runs(full: FullStack, sid: str) -> list[dict[str, Any]]:
    return [
        e for e in full.executions()
        if e["namespace"] == NS and e["task_id"].startswith(f"{sid}@") and e["event"] == "start"
    ]  # fmt: skip


def _occurrences(full: FullStack, sid: str) -> Counter[str]:
    req = history_pb2.ListScheduleOccurrencesRequest(namespace=NS, schedule_id=sid, page_size=1000)
    resp = full.history.ListScheduleOccurrences(req, timeout=30)
    return Counter(history_pb2.OccurrenceOutcome.Name(o.outcome) for o in resp.occurrences)


def _create_schedule(full: FullStack, sid: str, window_ms: int = 60_000) -> None:
    policy = schedules_pb2.SchedulePolicy(
        catch_up_window=to_duration(window_ms), catch_up=schedules_pb2.CATCH_UP_POLICY_RUN_ONCE
    )
    schedule = schedules_pb2.Schedule(
        namespace=NS, id=sid, queue="e2e", handler="record", policy=policy,
        spec=schedules_pb2.ScheduleSpec(interval=to_duration(1_000)),
    )  # fmt: skip
    stub = schedules_pb2_grpc.ScheduleServiceStub(full.channel)
    stub.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedule), timeout=30)


def test_every_second_schedule_on_the_production_stack(full: FullStack) -> None:
    _create_schedule(full, "beat")
    runs = eventually(lambda: (r := _schedule_runs(full, "beat")) and len(r) >= 10 and r, 90)
    nominal = sorted(int(e["key"].rsplit("@", 1)[1]) for e in runs)
    print(f"schedule runs: {len(nominal)}, distinct occurrences: {len(set(nominal))}")
    assert len(set(nominal)) == len(nominal)  # no occurrence ran twice
    assert all(b - a == 1_000 for a, b in itertools.pairwise(nominal))
    assert all(e["started_ms"] >= int(e["key"].rsplit("@", 1)[1]) for e in runs)
    fired = [e["fired_ms"] - int(e["key"].rsplit("@", 1)[1]) for e in runs]
    print(f"schedule lateness due → queue: max {max(fired)} ms")
    assert _occurrences(full, "beat")["OCCURRENCE_OUTCOME_FIRED"] >= 10


def test_dispatchers_down_past_the_catch_up_window_record_the_missed(full: FullStack) -> None:
    # Runs last in this module: it stops every dispatcher and starts a fresh one.
    _create_schedule(full, "catch", window_ms=2_000)
    eventually(lambda: len(_schedule_runs(full, "catch")) >= 2, 60)
    for d in full.dispatchers:
        if d.proc.poll() is None:
            d.kill9()
    time.sleep(8)  # the outage itself: longer than the 2 s catch-up window
    fresh = full.spawn(["dispatcher", *full.backend])
    fresh.wait_for(re.compile("dispatcher running"), timeout=60)
    outcomes = eventually(
        lambda: (o := _occurrences(full, "catch"))["OCCURRENCE_OUTCOME_MISSED"] >= 3 and o,
        timeout=60,
    )
    print(f"after the outage: {dict(outcomes)}")
    runs = _schedule_runs(full, "catch")
    nominal = [int(e["key"].rsplit("@", 1)[1]) for e in runs]
    # The misses are not replayed: every run is of an occurrence that was recorded fired.
    assert len(set(nominal)) == len(nominal)
