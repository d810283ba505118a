"""``/metrics`` of real processes, scraped as Prometheus would: a ``tikk server --processes 2``
group (each member's counts once, none lost when a member is killed), a dispatcher's and a
worker's ``--metrics``, and the exposure rule of ``--http``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_server_processes import Group, create_tasks, serving
from tests.waiting import eventually
from tikk.v1 import worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.e2e

_METRICS = re.compile(r"metrics (http://[\d.]+:\d+/)metrics")
_MAX_CHANNELS = 64


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(base + "metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(base: str, name: str, **labels: str) -> float:
    return scrape(base).get((name, tuple(sorted(labels.items()))), 0.0)


def refuse_one_result(group: Group, pid: int) -> None:
    """On a connection member ``pid`` serves, report a result of no delivery: refused
    (``missing`` token), and counted by that member."""
    for attempt in range(_MAX_CHANNELS):
        for channel in group.channels:  # so that the one open connection is the new one
            channel.close()
        group.channels.clear()
        create_tasks(group.connect(), "m-refused", f"probe{pid}-{attempt}", 1)
        if serving(group) != {pid}:
            continue
        stub: Any = worker_pb2_grpc.WorkerServiceStub(group.channels[-1])
        result = worker_pb2.RunResult(run_id="r", kind=worker_pb2.RESULT_KIND_SUCCEEDED)
        result.delivery.namespace, result.delivery.task_id = "m-refused", "nope"
        batches = iter([worker_pb2.RunResultBatch(results=[result])])
        [answer] = list(stub.ReportResultBatches(batches, timeout=30))
        assert answer.acks[0].code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        return
    raise AssertionError(f"no connection reached pid {pid}")


def test_a_group_counts_each_members_events_once_and_keeps_them_through_a_restart(
    tmp_path: Path,
) -> None:
    group = Group(tmp_path, "server", 2, "--http", "127.0.0.1:0")
    try:
        base = _METRICS.search(group.supervisor.output()).group(1)  # type: ignore[union-attr]
        dispatcher = group.start(
            "dispatcher", "--data-dir", str(tmp_path), "--shards", "64", "--metrics", "127.0.0.1:0"
        )
        worker = group.start(
            "worker", "tests.e2e.worker_app:worker", "--server", group.address,
            "--metrics", "127.0.0.1:0",
        )  # fmt: skip
        for pid in group.members:
            refuse_one_result(group, pid)
        refused = ("tikk_results_refused_total", {"reason": "missing"})
        assert value(base, refused[0], **refused[1]) == 2  # one per member: summed, once each
        created = create_tasks(group.connect(), "m-run", "t", 5)
        eventually(lambda: group.executed("m-run") == set(created), timeout=60)
        dispatched = dispatcher.wait_for(_METRICS).group(1)
        ran = worker.wait_for(_METRICS).group(1)
        assert value(dispatched, "tikk_tasks_dispatched_total", queue="e2e") >= 5
        assert value(dispatched, "tikk_dispatch_shards_owned") == 64
        succeeded = {"queue": "e2e", "handler": "record", "outcome": "succeeded"}
        eventually(lambda: value(ran, "tikk_runs_total", **succeeded) >= 5, timeout=30)
        os.kill(group.members[1], 9)
        group.supervisor.wait_for(re.compile(r"process 2 of 2 started again"), timeout=60)
        assert value(base, refused[0], **refused[1]) == 2  # the dead member's count stays
    finally:
        assert group.close() == 0


def test_an_exposed_http_listener_without_tls_and_auth_is_refused(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "server.cli", "server", "--data-dir", str(tmp_path),
           "--listen", "127.0.0.1:0", "--http", "0.0.0.0:0"]  # fmt: skip
    done = subprocess.run(cli, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "--http: refusing to serve 0.0.0.0:0 without TLS" in done.stderr
