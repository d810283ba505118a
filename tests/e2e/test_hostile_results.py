"""What a captured delivery token buys, against real ``tikk dev --auth`` processes on the
embedded store and on Cassandra: a bounded number of records, only while the token is young,
and no way to hide a run from a query of recent runs.

The test holds a worker credential for the queue and reads real deliveries off the local queue
file as a worker would (the dispatcher of ``tikk dev`` signs them). It replays one token under
new run ids, reports a token whose delivery was fired long ago (made with the deployment's own
keys file, as a token captured then would be: the server's clock is not the test's to move),
and reports runs stamped in year 9999 and at 0.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest

from tests.contract.cassandra_keyspace import REPLICATION
from tests.deliveries import taken_off_queue
from tests.e2e.auth_stack import LISTENING, AuthStack, Token, bearer, tikk
from tests.e2e.conftest import Process
from tests.services import CASSANDRA, require, with_login
from tests.waiting import eventually
from tikk import delivery_codec
from tikk.delivery_tokens import load_keys
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.settings import Limits
from tikk.v1 import (
    history_pb2,
    history_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NS = "team-h"
QUEUE = "replayed"
SHARDS = 16
OK = grpc.StatusCode.OK.value[0]
NOT_CURRENT = grpc.StatusCode.FAILED_PRECONDITION.value[0]
DENIED = grpc.StatusCode.PERMISSION_DENIED.value[0]
BOUND = Limits().max_extra_runs
YEAR_9999_MS = 253_402_300_799_000
DAY_MS = 86_400_000


@dataclass
class Rig:
    """``tikk dev --auth`` and a channel to it, with a writer's, a reader's and a worker's
    credentials."""

    stack: AuthStack
    process: Process
    channel: grpc.Channel
    writer: Token
    reader: Token
    worker: Token

    def create(self, max_attempts: int = 3) -> str:
        task_id = uuid.uuid4().hex
        req = tasks_pb2.CreateTaskRequest(namespace=NS, task_id=task_id, queue=QUEUE, handler="h")
        req.retry_policy.max_attempts = max_attempts
        tasks_pb2_grpc.TaskServiceStub(self.channel).CreateTask(
            req, timeout=15, metadata=bearer(self.writer)
        )
        return task_id

    def take(self, *task_ids: str) -> list[worker_pb2.Delivery]:
        taken = asyncio.run(taken_off_queue(self.stack.data_dir / "queue.db", QUEUE, task_ids))
        return [taken[t] for t in task_ids]

    def report(self, results: Sequence[worker_pb2.RunResult]) -> list[worker_pb2.ResultAck]:
        stub = worker_pb2_grpc.WorkerServiceStub(self.channel)
        batch = worker_pb2.RunResultBatch(results=results)
        answers = stub.ReportResultBatches(iter([batch]), timeout=30, metadata=bearer(self.worker))
        return list(next(answers).acks)

    def task(self, task_id: str) -> tasks_pb2.Task:
        req = tasks_pb2.GetTaskRequest(namespace=NS, task_id=task_id)
        stub = tasks_pb2_grpc.TaskServiceStub(self.channel)
        task: tasks_pb2.Task = stub.GetTask(req, timeout=15, metadata=bearer(self.reader))
        return task

    def runs(self, task_id: str) -> list[history_pb2.Run]:
        req = history_pb2.ListTaskRunsRequest(namespace=NS, task_id=task_id, page_size=100)
        stub = history_pb2_grpc.HistoryServiceStub(self.channel)
        return list(stub.ListTaskRuns(req, timeout=15, metadata=bearer(self.reader)).runs)

    def output(self) -> str:
        return "\n".join(self.process.lines)


def result(
    delivery: worker_pb2.Delivery,
    kind: worker_pb2.ResultKind = worker_pb2.RESULT_KIND_SUCCEEDED,
    *,
    finished_ms: int | None = None,
    output: bytes = b"",
) -> worker_pb2.RunResult:
    r = worker_pb2.RunResult(
        run_id=uuid.uuid4().hex, delivery=delivery, kind=kind, worker_id="w", output=output
    )
    due = delivery.due_time.ToMilliseconds()
    r.start_time.FromMilliseconds(due + 10)
    r.finish_time.FromMilliseconds(due + 20 if finished_ms is None else finished_ms)
    if kind != worker_pb2.RESULT_KIND_SUCCEEDED:
        r.error_type, r.error_message = "Boom", "failed"
    return r


@pytest.fixture(params=["sqlite", "cassandra"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    """The embedded store, or the task store, credentials and run history on a keyspace of
    their own (migrated by ``tikk migrate``); the ready queue is the local file either way."""
    url = ""
    if request.param == "cassandra":
        keyspace = f"tikk_replay_{uuid.uuid4().hex[:10]}"
        url = with_login(f"cassandra://{require('cassandra', CASSANDRA)}/{keyspace}")
    stack = AuthStack(tmp_path, store=url)
    history = ["--history", url] if url else []
    if url:
        done = tikk("migrate", *stack.backend_args(), *history, "--shards", str(SHARDS),
                    "--replication", REPLICATION)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    roles = {"ops": f"write:{NS}", "audit": f"read:{NS}", "runner": f"worker:{QUEUE}"}
    tokens = [stack.create(name, role)[1] for name, role in roles.items()]
    process = Process(
        ["dev", *stack.backend_args(), *history, "--listen", "127.0.0.1:0", "--shards",
         str(SHARDS), "--auth"],
        {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    stack.servers.append(process)
    address = f"127.0.0.1:{process.wait_for(LISTENING, timeout=60).group(1)}"
    with grpc.insecure_channel(address) as channel:
        yield Rig(stack, process, channel, *tokens)
    stack.close()
    if url:
        session = CassandraSession(CassandraConfig.from_url(url))
        session.connect()
        session.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        session.shutdown()


def test_one_captured_token_adds_at_most_the_bound_of_runs(rig: Rig) -> None:
    """The real run succeeds; the same token replayed under new run ids with chosen output
    records ``max_extra_runs`` runs (as duplicate deliveries would) and no more."""
    task_id = rig.create()
    [delivery] = rig.take(task_id)
    [real] = rig.report([result(delivery, output=b"real")])
    assert real.code == OK, real
    replayed = rig.report([result(delivery, output=b"chosen") for _ in range(3 * BOUND)])
    one_more = rig.report([result(delivery, output=b"chosen")])
    codes = [a.code for a in replayed + one_more]
    assert codes.count(OK) == BOUND and codes.count(NOT_CURRENT) == 2 * BOUND + 1
    refused = next(a for a in one_more + replayed if a.code == NOT_CURRENT)
    assert "further runs" in refused.message, refused
    runs = rig.runs(task_id)
    assert len(runs) == 1 + BOUND
    assert sorted(r.output for r in runs) == [b"chosen"] * BOUND + [b"real"]
    assert rig.task(task_id).state == tasks_pb2.TASK_STATE_SUCCEEDED
    # The server's log is read by a thread of this test: it may trail the answers a little.
    eventually(lambda: "refused (too_many_runs)" in rig.output(), timeout=10)
    assert delivery.token not in rig.output()


def test_an_expired_token_is_refused_and_changes_nothing(rig: Rig) -> None:
    """A token whose delivery was fired longer ago than a token lives (31 days: made with the
    deployment's key, as a token captured then would be) is dropped for good, before anything
    is read; the fresh token of the same attempt still takes its result."""
    task_id = rig.create()
    [delivery] = rig.take(task_id)
    keys = load_keys(rig.stack.data_dir / "delivery-keys")
    fresh = delivery_codec.from_proto(delivery, SHARDS)
    old = replace(fresh, fired_ms=int(time.time() * 1000) - 31 * DAY_MS, token="")
    captured = delivery_codec.to_proto(keys.signed(old))
    for kind in (worker_pb2.RESULT_KIND_SUCCEEDED, worker_pb2.RESULT_KIND_FAILED):
        [ack] = rig.report([result(captured, kind)])
        assert ack.code == DENIED and "expired" in ack.message, ack
    assert rig.task(task_id).state == tasks_pb2.TASK_STATE_DISPATCHED
    assert rig.runs(task_id) == []
    eventually(lambda: "refused (token_expired)" in rig.output(), timeout=10)
    [ack] = rig.report([result(delivery)])
    assert ack.code == OK, ack


def test_a_run_stamped_in_year_9999_or_at_zero_is_found_in_the_last_hour(rig: Rig) -> None:
    """The worker's finish time is kept as reported; the history files the run under the time
    the server recorded it, which is what the default query (the last hour) selects by."""
    far, zero = rig.create(max_attempts=1), rig.create(max_attempts=1)
    before_ms = int(time.time() * 1000)
    for delivery, finished in zip(rig.take(far, zero), (YEAR_9999_MS, 0), strict=True):
        [ack] = rig.report([result(delivery, worker_pb2.RESULT_KIND_FAILED, finished_ms=finished)])
        assert ack.code == OK, ack
    after_ms = int(time.time() * 1000)
    req = history_pb2.ListRunsRequest(
        namespace=NS, queue=QUEUE, status=history_pb2.RUN_STATUS_DEAD_LETTERED
    )
    stub = history_pb2_grpc.HistoryServiceStub(rig.channel)
    runs = stub.ListRuns(req, timeout=15, metadata=bearer(rig.reader)).runs
    assert sorted((r.task_id, r.finish_time.ToMilliseconds()) for r in runs) == sorted(
        [(far, YEAR_9999_MS), (zero, 0)]
    )
    for run in runs:
        assert before_ms - 1_000 <= run.record_time.ToMilliseconds() <= after_ms + 1_000
