"""The worker wire protocol (docs/worker-protocol.md) proved by a worker that shares no code
with tikk: the example Go worker (``clients/go-worker``) on the production stack (Cassandra,
Kafka with SASL/SCRAM over TLS, ZooKeeper), beside a real server (``--auth``, over TLS) and
dispatcher.

It presents a worker token over TLS, takes its queue URL from GetWorkerConfig, consumes the
queue's topic in the queue's group, claims the start of a delivery with a start timeout,
reports results on ReportResultBatches echoing each delivery (the server checks its token) and
commits after the acknowledgement.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from server.certs import make_dev_pki
from tests.e2e.auth_stack import LISTENING, tikk
from tests.e2e.conftest import ROOT, Process
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, in_ci, require, with_login
from tests.waiting import eventually
from tests.worker_server import free_port
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
NS = "goworker"
QUEUE = "go"
BUILD_TIMEOUT_S = 240
# Every task is due this long after it is created: the worker is consuming by then, and a run
# that started early would show.
LEAD_MS = 4_000


class GoWorker(Process):
    """The built Go worker as a child process, its output collected as ``Process`` does."""

    def __init__(self, binary: Path, args: list[str]) -> None:
        self.args = [str(binary), *args]
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            self.args,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()


class GoStack:
    """A server and a dispatcher on the production stack (as ``test_full_stack.FullStack``
    starts them), and the Go worker as the only worker of queue ``QUEUE``."""

    worker: GoWorker  # the one running now (``start_worker``)

    def __init__(self, tmp: Path, binary: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        store = with_login(f"cassandra://{CASSANDRA}/tikk_e2e_go_{tag}")
        self.backend = [
            "--store", store, "--history", store,
            # One partition: a message behind a committed offset is a message done.
            "--queue", with_login(f"kafka://{KAFKA}?prefix=e2ego{tag}.&partitions=1"),
            "--ownership", with_login(f"zk://{ZOOKEEPER}/tikk-e2e-go-{tag}"),
            "--session-timeout", "4s", "--shards", "8",
        ]  # fmt: skip
        # The server checks the tokens the dispatcher signs: one keys file for both.
        self.env = {"PYTHONUNBUFFERED": "1", "TIKK_DELIVERY_KEYS": str(tmp / "delivery-keys")}
        self.binary = binary
        self.tag = tag
        self.tmp = tmp
        self.processes: list[Process] = []

    def start(self) -> None:
        migrate = Process(["migrate", *self.backend], self.env)
        assert migrate.proc.wait(120) == 0, migrate.output()
        # Made before the server starts, so that its view of the credentials holds them.
        self.worker_token = self.credential("go-worker", f"worker:{QUEUE}")
        client_token = self.credential("client", f"write:{NS}").read_text().strip()
        pki = make_dev_pki(self.tmp / "pki")
        self.ca = str(pki.ca_cert)
        self.tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
        self.address = self.start_server(0)[0]
        dispatcher = self.spawn(["dispatcher", *self.backend])
        dispatcher.wait_for(re.compile("dispatcher running"), timeout=60)
        self.start_worker(1)
        client = grpc.access_token_call_credentials(client_token)
        tls_channel = grpc.ssl_channel_credentials(pki.ca_cert.read_bytes())
        self.channel = grpc.secure_channel(
            self.address, grpc.composite_channel_credentials(tls_channel, client)
        )
        self.tasks: Any = tasks_pb2_grpc.TaskServiceStub(self.channel)
        self.history: Any = history_pb2_grpc.HistoryServiceStub(self.channel)

    def start_server(self, port: int) -> tuple[str, Process]:
        """A server on ``port`` (0: any free one); its address and process."""
        listen = ["--listen", f"127.0.0.1:{port}", "--auth", *self.tls]
        server = self.spawn(["server", *self.backend, *listen])
        return f"127.0.0.1:{server.wait_for(LISTENING, timeout=60).group(1)}", server

    def start_worker(self, n: int, servers: str = "") -> None:
        """Start Go worker ``n`` (its worker id ends in ``-n``), once the last one stopped,
        on ``servers`` (``-server``; the first server's address by default)."""
        if n > 1:
            self.worker.stop()
        self.worker_id = f"go-e2e-{self.tag}-{n}"
        server = servers or self.address
        args = ["-server", server, "-queues", QUEUE, "-worker-id", self.worker_id,
                "-token-file", str(self.worker_token), "-tls-ca", self.ca]  # fmt: skip
        self.worker = GoWorker(self.binary, args)
        self.processes.append(self.worker)
        self.worker.wait_for(re.compile(f"consuming queue {QUEUE} "), timeout=60)

    def credential(self, name: str, role: str) -> Path:
        """A credential made with ``tikk auth create``; the file holding its token."""
        token_file = self.tmp / f"{name}.token"
        done = tikk("auth", "create", "--name", name, "--role", role,
                    "--token-file", str(token_file), *self.backend)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return token_file

    def spawn(self, args: list[str]) -> Process:
        p = Process(args, self.env)
        self.processes.append(p)
        return p

    def close(self) -> None:
        if hasattr(self, "channel"):
            self.channel.close()
        for p in reversed(self.processes):
            p.stop()


def _go_binary() -> str:
    """The go command; fails under CI, skips elsewhere, if there is none."""
    found = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if found:
        return found
    message = "no Go toolchain (go on the PATH or /usr/local/go/bin) to build clients/go-worker"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def build_worker(out: Path) -> Path:
    """``scripts/go-worker.sh build OUT``, bounded; prints how long it took."""
    _go_binary()
    began = time.monotonic()
    done = subprocess.run(
        [str(ROOT / "scripts" / "go-worker.sh"), "build", str(out)],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env={**os.environ, "GO_WORKER_TIMEOUT": str(BUILD_TIMEOUT_S)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"go build of clients/go-worker: {time.monotonic() - began:.1f} s")
    return out


@pytest.fixture(scope="module")
def go(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoStack]:
    for name, address in (("cassandra", CASSANDRA), ("kafka", KAFKA), ("zookeeper", ZOOKEEPER)):
        require(name, address)
    tmp = tmp_path_factory.mktemp("go-worker")
    stack = GoStack(tmp, build_worker(tmp / "go-worker"))
    try:
        stack.start()
        yield stack
    finally:
        stack.close()


def create(go: GoStack, task_id: str, handler: str, due_ms: int, **extra: Any) -> None:
    req = tasks_pb2.CreateTaskRequest(
        namespace=NS, task_id=task_id, queue=QUEUE, handler=handler,
        payload=task_id.encode(), run_at=to_timestamp(due_ms), **extra,
    )  # fmt: skip
    go.tasks.CreateTask(req, timeout=30)


def settled(go: GoStack, task_id: str) -> Any:
    """The task once it reached an end state, else None."""
    req = tasks_pb2.GetTaskRequest(namespace=NS, task_id=task_id)
    task = go.tasks.GetTask(req, timeout=30)
    ends = (tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_DEAD_LETTERED)
    return task if task.state in ends else None


def runs_of(go: GoStack, task_id: str) -> list[Any]:
    """The task's runs, oldest attempt first."""
    req = history_pb2.ListTaskRunsRequest(namespace=NS, task_id=task_id, page_size=100)
    runs = list(go.history.ListTaskRuns(req, timeout=30).runs)
    return sorted(runs, key=lambda r: (r.attempt, r.start_time.ToMilliseconds()))


def assert_on_time(run: Any) -> None:
    """No run starts before its attempt was due."""
    assert run.start_time.ToMilliseconds() >= run.due_time.ToMilliseconds(), run


def test_go_worker_runs_echo_fail_and_unknown_handlers(go: GoStack) -> None:
    due = time.time_ns() // 1_000_000 + LEAD_MS
    echoes = [f"echo-{i}" for i in range(20)]
    for i, task_id in enumerate(echoes):
        create(go, task_id, "echo", due + i * 50)
    # The start claim: a worker must be granted STARTED before it runs this one.
    create(go, "echo-claimed", "echo", due, start_timeout=to_duration(60_000))
    retry = tasks_pb2.RetryPolicy(max_attempts=2, initial_backoff=to_duration(500), jitter=0.0)
    create(go, "fail-twice", "fail", due, retry_policy=retry)
    create(go, "unknown", "no-such-handler", due)
    every = [*echoes, "echo-claimed", "fail-twice", "unknown"]
    tasks = {t: eventually(partial(settled, go, t), timeout=120, every=0.5) for t in every}
    for task_id in [*echoes, "echo-claimed"]:
        assert tasks[task_id].state == tasks_pb2.TASK_STATE_SUCCEEDED, tasks[task_id]
        assert_echoed(go, task_id, due)
    assert_failed_twice(go, tasks["fail-twice"], due)
    assert_unknown(go, tasks["unknown"], due)
    dead = history_pb2.ListDeadLettersRequest(namespace=NS, queue=QUEUE, page_size=100)
    listed = go.history.ListDeadLetters(dead, timeout=30).tasks
    assert sorted(t.id for t in listed) == ["fail-twice", "unknown"]
    assert not [line for line in go.worker.lines if "refused for good" in line], go.worker.output()


def assert_echoed(go: GoStack, task_id: str, due: int) -> None:
    runs = runs_of(go, task_id)
    assert runs, f"{task_id}: no run in the history"
    assert {r.status for r in runs} == {history_pb2.RUN_STATUS_SUCCEEDED}, runs
    for run in runs:  # a duplicate delivery may add a run (at-least-once); each is the same
        assert run.worker_id == go.worker_id
        assert run.output == task_id.encode()
        assert run.due_time.ToMilliseconds() >= due
        assert run.idempotency_key == f"{NS}/{task_id}@{run.scheduled_time.ToMilliseconds()}"
        assert_on_time(run)


def assert_failed_twice(go: GoStack, task: Any, due: int) -> None:
    assert task.state == tasks_pb2.TASK_STATE_DEAD_LETTERED, task
    assert task.last_error_type == "DeliberateFailure"
    runs = runs_of(go, task.id)
    attempts = sorted({r.attempt for r in runs})
    assert attempts == [1, 2], runs
    final = [r for r in runs if r.status == history_pb2.RUN_STATUS_DEAD_LETTERED]
    assert [r.attempt for r in final] == [2], runs
    for run in runs:
        assert run.worker_id == go.worker_id
        assert run.error_type == "DeliberateFailure"
        assert run.error_message == 'asked to fail (payload "fail-twice")'
        assert_on_time(run)
    first = min(r.due_time.ToMilliseconds() for r in runs if r.attempt == 1)
    retried = min(r.due_time.ToMilliseconds() for r in runs if r.attempt == 2)
    assert first == due
    assert retried >= first + 500  # the retry waited out its backoff


def assert_unknown(go: GoStack, task: Any, due: int) -> None:
    assert task.state == tasks_pb2.TASK_STATE_DEAD_LETTERED, task
    runs = runs_of(go, task.id)
    assert [r.attempt for r in runs] == [1] * len(runs) and runs, runs
    for run in runs:
        assert run.status == history_pb2.RUN_STATUS_DEAD_LETTERED
        assert run.error_type == "UnknownHandler"
        assert "no-such-handler" in run.error_message
        assert run.due_time.ToMilliseconds() == due
        assert_on_time(run)


def test_a_restarted_go_worker_runs_nothing_it_committed(go: GoStack) -> None:
    """The worker commits each offset after its result was acknowledged, and a stopping one
    finishes the poll in hand: its successor starts after everything that was recorded."""
    due = time.time_ns() // 1_000_000 + 1_000
    create(go, "before-restart", "echo", due)
    eventually(partial(settled, go, "before-restart"), timeout=120, every=0.2)
    first = go.worker_id
    go.start_worker(2)
    create(go, "after-restart", "echo", time.time_ns() // 1_000_000)
    eventually(partial(settled, go, "after-restart"), timeout=120, every=0.2)
    # On one partition the successor read from the committed offset on: anything its
    # predecessor had not committed would have run again before the new task.
    assert {r.worker_id for r in runs_of(go, "before-restart")} == {first}
    assert {r.worker_id for r in runs_of(go, "after-restart")} == {go.worker_id}
    assert go.worker_id != first


def test_a_go_worker_given_two_servers_loses_no_result_when_either_is_killed(go: GoStack) -> None:
    """``-server B,C`` balances over both. B is killed (``-9``) while tasks fire, started
    again on its port, then C is killed: whichever held the worker's result stream, the
    worker reports on the other, and every task succeeds, on time, with no result refused."""
    ports = [free_port(), free_port()]
    servers = {port: go.start_server(port)[1] for port in ports}
    go.start_worker(3, ",".join(f"127.0.0.1:{port}" for port in ports))
    due = time.time_ns() // 1_000_000 + 2_000
    ids = [f"failover-{i}" for i in range(60)]
    for i, task_id in enumerate(ids):  # one every 200 ms, over 12 s
        create(go, task_id, "echo", due + i * 200)
    _sleep_until(due + 3_000)
    servers[ports[0]].kill9()
    servers[ports[0]] = go.start_server(ports[0])[1]
    _sleep_until(due + 8_000)
    servers[ports[1]].kill9()
    tasks = {t: eventually(partial(settled, go, t), timeout=120, every=0.5) for t in ids}
    assert {t: task.state for t, task in tasks.items()} == dict.fromkeys(
        ids, tasks_pb2.TASK_STATE_SUCCEEDED
    )
    for task_id in ids:
        assert_echoed(go, task_id, due)
    assert not [line for line in go.worker.lines if "refused for good" in line], go.worker.output()
    # One of the two kills took the stream's server: the worker moved, it did not just wait.
    assert [line for line in go.worker.lines if "result stream lost" in line], go.worker.output()


def _sleep_until(at_ms: int) -> None:
    time.sleep(max(0.0, at_ms / 1000 - time.time()))
