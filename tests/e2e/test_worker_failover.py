"""A real ``tikk worker`` given two servers (``tests/e2e/cluster.py``: one embedded data
directory, two ``tikk server`` processes and a ``tikk dispatcher``) keeps running tasks while
the server its result stream goes to is ``kill -9``ed, or hangs: the stream is reopened on
the other server and every result not yet acknowledged is sent again there. Every task runs
once (the worker's own log of its runs), its run is in the history once with the run id the
worker ran (nothing lost, nothing recorded twice), and the worker counts each result
acknowledged once."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.conftest import Process, read_executions
from tests.waiting import eventually
from tikk.client import Client, TaskSelection, TaskSpec
from tikk.v1 import history_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NS = "worker-failover"
TASKS = 240
SPREAD_S = 8.0  # the tasks fall due over this long, so many run after the kill
RECORDED = "tikk_results_recorded_total"
_REOPENED = re.compile(r"result stream open again after ([\d.]+) s; sending (\d+) result")
_FINISHED = re.compile(r"tikk worker finished (\d+) runs")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    servers = Cluster(tmp_path, http=True, env={"TIKK_E2E_LOG": str(tmp_path / "runs.jsonl")})
    servers.start()
    yield servers
    servers.close()


def create_spread(client: Client) -> list[str]:
    """``TASKS`` tasks of the worker's queue, due one after another over ``SPREAD_S``."""
    start = datetime.now(tz=UTC) + timedelta(seconds=1)
    ids = [f"w-{n}" for n in range(TASKS)]
    specs = (
        TaskSpec(
            "e2e",
            "record",
            str(n).encode(),
            task_id=task_id,
            run_at=start + timedelta(seconds=SPREAD_S * n / TASKS),
        )
        for n, task_id in enumerate(ids)
    )
    assert all(result.ok for result in client.import_tasks(specs))
    return ids


def the_streams_server(cluster: Cluster) -> int:
    """The server that records the worker's results: its one stream goes there."""
    counts: list[float] = eventually(lambda: _recorded_somewhere(cluster), 60)
    assert min(counts) == 0, f"results recorded by both servers before any kill: {counts}"
    return counts.index(max(counts))


def _recorded_somewhere(cluster: Cluster) -> list[float] | None:
    counts = [cluster.metric(i, RECORDED) for i in range(len(cluster.addresses))]
    return counts if sum(counts) >= 20 else None


# A server killed resets its connections at once; one that hangs (SIGSTOP: a process stuck,
# or a host gone without a word) is noticed by the worker's pings, within their interval
# and timeout (``tikk.client.server_list``).
@pytest.mark.parametrize("fault", ["kill9", "hang"])
def test_a_worker_reports_through_the_loss_of_its_streams_server(
    cluster: Cluster, tmp_path: Path, fault: str
) -> None:
    env = {"TIKK_E2E_LOG": str(tmp_path / "runs.jsonl"), "TIKK_LOG_LEVEL": "INFO"}
    worker = Process(["worker", "tests.e2e.worker_app:worker", "--server", cluster.target], env)
    try:
        with Client(cluster.target, namespace=NS, timeout=30) as client:
            ids = create_spread(client)
            doomed = the_streams_server(cluster)
            killed_at = time.monotonic()
            if fault == "kill9":
                cluster.kill9(doomed)
            else:
                cluster.pause(doomed)
            survivor = 1 - doomed
            before = cluster.metric(survivor, RECORDED)
            eventually(lambda: cluster.metric(survivor, RECORDED) > before, 30, every=0.02)
            moved_s = time.monotonic() - killed_at
            done = TaskSelection(queue="e2e", state="succeeded")
            eventually(lambda: client.count_tasks(done).count == TASKS, 120)
            runs = {task_id: list(client.list_task_runs(task_id)) for task_id in ids}
    finally:
        assert worker.stop() == 0, worker.output()
    executed = [
        line for line in read_executions(tmp_path / "runs.jsonl") if line["namespace"] == NS
    ]
    reopened = worker.wait_for(_REOPENED, timeout=5)
    finished = int(worker.wait_for(_FINISHED, timeout=5).group(1))
    print(
        f"the survivor recorded a result {moved_s:.2f} s after the {fault}; the worker "
        f"reopened its stream {reopened.group(1)} s after the loss, sending "
        f"{reopened.group(2)} result(s) again"
    )
    check_once(ids, runs, executed)
    assert finished == TASKS, worker.output()  # each result acknowledged once
    assert len(re.findall("result stream lost", "\n".join(worker.lines))) == 1, worker.output()


def check_once(
    ids: list[str], runs: dict[str, list[history_pb2.Run]], executed: list[dict[str, object]]
) -> None:
    """Each task ran once, and its one run is in the history under the id it ran with."""
    ran = Counter(str(line["task_id"]) for line in executed)
    twice = sorted(task_id for task_id, count in ran.items() if count > 1)
    assert not twice, f"ran more than once: {twice}"
    assert sorted(ran) == sorted(ids), "tasks never ran: " + str(sorted(set(ids) - set(ran)))
    run_ids = {str(line["task_id"]): line["run_id"] for line in executed}
    for task_id in ids:
        assert [(r.run_id, r.status) for r in runs[task_id]] == [
            (run_ids[task_id], history_pb2.RUN_STATUS_SUCCEEDED)
        ], task_id
    assert all(r.attempt == 1 for rs in runs.values() for r in rs)
