"""tikk's embedded default as the benchmark runs it (``devtools.bench``): ``tikk dev`` (the
server with its dispatcher, over SQLite), two workers of ``devtools.bench_worker``, and
the tasks imported through ``ImportTasks`` (``devtools.bench_load``)."""

from __future__ import annotations

from devtools.bench_load import ingest
from devtools.bench_procs import wait_listening
from devtools.peers.processes import PeerFleet, python_argv
from devtools.peers.workloads import TaskPlan

WORKERS = 2
SHARDS = 64
QUEUE = "bench"  # the queue devtools.bench_worker consumes


class TikkEmbedded:
    """``tikk dev`` and its workers."""

    name = "tikk"
    expected_ingest_per_s = 4_000.0

    def __init__(self) -> None:
        self._address = ""

    def start(self, fleet: PeerFleet) -> None:
        cli = python_argv("-m", "server.cli")
        data = ["--data-dir", str(fleet.work / "data")]
        dev = [*cli, "dev", *data, "--shards", str(SHARDS), "--listen", "127.0.0.1:0"]
        self._address = wait_listening(fleet.launch("server", "server+dispatcher", dev))
        for i in range(WORKERS):
            worker = [*cli, "worker", "devtools.bench_worker:worker", "--server", self._address]
            fleet.launch(f"worker-{i + 1}", "worker", worker)

    def submit(self, plan: TaskPlan) -> float:
        # Task ids are the server's: lost tasks are counted from the number started.
        return ingest(self._address, plan.tasks, plan.spread, QUEUE).seconds

    def close(self) -> None:
        """Nothing to release: each ingest closes its own channels."""
