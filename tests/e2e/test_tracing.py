"""One trace from the API call to the handler, across real processes, on the embedded default
and on the production stack (where the context crosses Kafka in the message headers)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.conftest import Process
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, require, with_login
from tests.waiting import eventually
from tikk.timestamps import to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc

pytestmark = pytest.mark.e2e
TRACE_ID = uuid.uuid4().hex
CALLER_SPAN = uuid.uuid4().hex[:16]
_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")


def documents(paths: list[Path]) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in paths
        if path.exists()
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def spans_of(docs: list[dict[str, Any]], trace_id: str) -> dict[str, dict[str, Any]]:
    """Spans of the trace by name (each name once in this test)."""
    spans = [d for d in docs if d.get("context", {}).get("trace_id") == "0x" + trace_id]
    by_name = {s["name"]: s for s in spans}
    assert len(by_name) == len(spans), [s["name"] for s in spans]
    return by_name


def histogram_counts(docs: list[dict[str, Any]], name: str) -> int:
    return sum(
        point["count"]
        for d in docs
        for rm in d.get("resource_metrics", [])
        for sm in rm["scope_metrics"]
        for m in sm["metrics"]
        if m["name"] == name
        for point in m["data"]["data_points"]
    )


class Deployment:
    """Processes started with ``--otel console:FILE``, one file each."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {
            "TIKK_E2E_LOG": str(tmp / "executions.jsonl"),
            "PYTHONUNBUFFERED": "1",
            # The server checks the delivery tokens the dispatcher signs: one keys file.
            "TIKK_DELIVERY_KEYS": str(tmp / "delivery-keys"),
        }
        self.processes: list[Process] = []
        self.files: list[Path] = []
        self.address = ""

    def spawn(self, name: str, args: list[str]) -> Process:
        path = self.tmp / f"{name}.otel.jsonl"
        self.files.append(path)
        process = Process([*args, "--otel", f"console:{path}"], self.env)
        self.processes.append(process)
        return process

    def serve(self, command: str, backend: list[str]) -> None:
        server = self.spawn(command, [command, *backend, "--listen", "127.0.0.1:0"])
        self.address = f"127.0.0.1:{server.wait_for(_LISTENING, timeout=60).group(1)}"

    def worker(self) -> None:
        self.spawn("worker", ["worker", "tests.e2e.worker_app:worker", "--server", self.address])

    def run_one_traced_task(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            tasks: Any = tasks_pb2_grpc.TaskServiceStub(channel)
            history: Any = history_pb2_grpc.HistoryServiceStub(channel)
            due = time.time_ns() // 1_000_000 + 1_500
            request = tasks_pb2.CreateTaskRequest(
                namespace="traced", task_id="t1", queue="e2e", handler="record",
                run_at=to_timestamp(due),
            )  # fmt: skip
            metadata = (("traceparent", f"00-{TRACE_ID}-{CALLER_SPAN}-01"),)
            tasks.CreateTask(request, metadata=metadata, timeout=30)
            runs = history_pb2.ListTaskRunsRequest(namespace="traced", task_id="t1")
            eventually(lambda: history.ListTaskRuns(runs, timeout=10).runs, timeout=60)

    def stop(self) -> list[dict[str, Any]]:
        """Stop every process (each flushes its telemetry on the way out); what they wrote."""
        for p in reversed(self.processes):
            assert p.stop() == 0, p.output()
        return documents(self.files)


def assert_one_trace_from_call_to_handler(docs: list[dict[str, Any]]) -> None:
    spans = spans_of(docs, TRACE_ID)
    create = spans["tikk.v1.TaskService/CreateTask"]
    dispatch = spans["dispatch e2e"]
    run = spans["run record"]
    assert create["parent_id"] == "0x" + CALLER_SPAN
    assert dispatch["parent_id"] == create["context"]["span_id"]
    assert run["parent_id"] == dispatch["context"]["span_id"]
    assert (create["kind"], dispatch["kind"], run["kind"]) == (
        "SpanKind.SERVER",
        "SpanKind.PRODUCER",
        "SpanKind.CONSUMER",
    )
    assert (
        run["attributes"]["tikk.idempotency_key"] == dispatch["attributes"]["tikk.idempotency_key"]
    )
    assert histogram_counts(docs, "tikk.dispatch.lateness") >= 1
    assert histogram_counts(docs, "tikk.run.start_lateness") >= 1


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    d = Deployment(tmp_path)
    yield d
    for p in d.processes:
        p.stop()


def test_embedded_one_trace_from_call_to_handler(deployment: Deployment) -> None:
    deployment.serve("dev", ["--data-dir", str(deployment.tmp / "data"), "--shards", "16"])
    deployment.worker()
    deployment.run_one_traced_task()
    assert_one_trace_from_call_to_handler(deployment.stop())


def test_full_stack_one_trace_through_kafka_headers(deployment: Deployment) -> None:
    for name, address in (("cassandra", CASSANDRA), ("kafka", KAFKA), ("zookeeper", ZOOKEEPER)):
        require(name, address)
    tag = uuid.uuid4().hex[:8]
    backend = [
        "--store", with_login(f"cassandra://{CASSANDRA}/tikk_trace_{tag}"),
        "--history", with_login(f"cassandra://{CASSANDRA}/tikk_trace_{tag}"),
        "--queue", with_login(f"kafka://{KAFKA}?prefix=trace{tag}.&partitions=2"),
        "--ownership", with_login(f"zk://{ZOOKEEPER}/tikk-trace-{tag}"),
        "--session-timeout", "4s", "--shards", "8",
    ]  # fmt: skip
    migrate = Process(["migrate", *backend], deployment.env)
    assert migrate.proc.wait(120) == 0, migrate.output()
    deployment.serve("server", backend)
    dispatcher = deployment.spawn("dispatcher", ["dispatcher", *backend])
    dispatcher.wait_for(re.compile("dispatcher running"), timeout=60)
    deployment.worker()
    deployment.run_one_traced_task()
    assert_one_trace_from_call_to_handler(deployment.stop())
