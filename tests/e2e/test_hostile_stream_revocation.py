"""A revocation reaches streams already open, against real ``tikk dev --auth`` processes on
the embedded store and on Cassandra.

An ``ImportTasks`` stream and a worker's ``ReportResultBatches`` stream are opened with a
credential, send one message that is taken, and the credential is revoked with
``tikk auth revoke``. Once the server's view of the credentials has reloaded (a unary call
with the same token is refused), the stream's next message ends it with UNAUTHENTICATED, and
nothing of that message is stored: no task, no run, no change of state. The refusal is in the
server's output at WARNING, the default level, without the token.

The result stream reports real deliveries: the dispatcher of ``tikk dev`` signs and publishes
them to the local queue file, which the test reads as a worker would.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.contract.cassandra_keyspace import REPLICATION
from tests.deliveries import taken_off_queue
from tests.e2e.auth_stack import LISTENING, AuthStack, Token, bearer, tikk
from tests.e2e.conftest import Process
from tests.services import CASSANDRA, require, with_login
from tests.waiting import eventually, eventually_async
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.v1 import (
    history_pb2,
    history_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NS = "team-a"
QUEUE = "revoked-results"
# A server reloads its view of the credentials at least every 5 s
# (server.auth.authenticator); the wait allows for slow machines.
REVOCATION_BOUND_S = 20.0
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED


class Dev:
    """An ``AuthStack`` and the ``tikk dev --auth`` (server and dispatcher) serving it."""

    def __init__(self, stack: AuthStack, history: str) -> None:
        self.stack = stack
        self._history = ["--history", history] if history else []
        self.process: Process | None = None

    def start(self) -> str:
        self.process = Process(
            ["dev", *self.stack.backend_args(), *self._history, "--listen", "127.0.0.1:0",
             "--shards", "16", "--auth"],
            {"PYTHONUNBUFFERED": "1", "TIKK_LOG_LEVEL": "WARNING"},
        )  # fmt: skip
        self.stack.servers.append(self.process)
        return f"127.0.0.1:{self.process.wait_for(LISTENING, timeout=60).group(1)}"

    async def create(self, name: str, *roles: str) -> tuple[str, Token]:
        return await asyncio.to_thread(self.stack.create, name, *roles)

    async def revoke(self, credential_id: str) -> None:
        await asyncio.to_thread(self.stack.revoke, credential_id)

    def logged(self, text: str) -> str:
        """The line of the server's output holding ``text``, once it is there."""
        assert self.process is not None
        lines = self.process.lines

        def found() -> str:
            return next((line for line in list(lines) if text in line), "")

        line: str = eventually(found, timeout=10)
        return line

    def output(self) -> str:
        return "\n".join(self.process.lines) if self.process is not None else ""


@pytest.fixture(params=["sqlite", "cassandra"])
def dev(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Dev]:
    """The embedded store, or the task store, credentials and run history on a keyspace of
    their own (migrated by ``tikk migrate``); the ready queue is the local file either way."""
    if request.param == "sqlite":
        stack = AuthStack(tmp_path)
        yield Dev(stack, "")
        stack.close()
        return
    keyspace = f"tikk_revoke_{uuid.uuid4().hex[:10]}"
    url = with_login(f"cassandra://{require('cassandra', CASSANDRA)}/{keyspace}")
    stack = AuthStack(tmp_path, store=url)
    done = tikk("migrate", *stack.backend_args(), "--history", url, "--shards", "16",
                "--replication", REPLICATION)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    yield Dev(stack, url)
    stack.close()
    session = CassandraSession(CassandraConfig.from_url(url))
    session.connect()
    # Schema changes are slow on a busy node: give the drop time rather than fail the test.
    session.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
    session.shutdown()


async def _until_refused(call: Callable[[], Awaitable[object]], what: str) -> None:
    """Wait until the server's view no longer holds the credential: ``call`` (a unary call
    with its token) is UNAUTHENTICATED."""

    async def refused() -> bool:
        try:
            await call()
        except grpc.aio.AioRpcError as exc:
            return exc.code() == UNAUTHENTICATED
        return False

    await eventually_async(refused, REVOCATION_BOUND_S, every_s=0.2, what=what)


async def _status_at_end(call: Any) -> grpc.StatusCode:
    """The status of a stream ``call``, once the answers it still sends are read (the status
    comes after them)."""
    try:
        while await call.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]
            pass
    except grpc.aio.AioRpcError:
        pass  # the status is read below
    code: grpc.StatusCode = await call.code()
    return code


def _batch(batch_id: int, task_id: str) -> tasks_pb2.ImportTasksRequest:
    task = tasks_pb2.CreateTaskRequest(namespace=NS, task_id=task_id, queue="q", handler="h")
    task.delay.FromSeconds(3600)
    return tasks_pb2.ImportTasksRequest(tasks=[task], batch_id=batch_id)


async def test_a_revoked_importer_stores_no_batch_after_the_revocation(dev: Dev) -> None:
    importer_id, importer = await dev.create("importer", f"write:{NS}")
    _, reader = await dev.create("reader", f"read:{NS}")
    address = dev.start()
    async with grpc.aio.insecure_channel(address) as channel:
        tasks = tasks_pb2_grpc.TaskServiceStub(channel)
        call = tasks.ImportTasks(metadata=bearer(importer), timeout=120)
        await call.write(_batch(1, "before"))
        assert (await call.read()).accepted == 1
        await dev.revoke(importer_id)
        probe = tasks_pb2.GetTaskRequest(namespace=NS, task_id="before")
        await _until_refused(
            lambda: tasks.GetTask(probe, metadata=bearer(importer), timeout=15),
            "the importer's unary calls refused",
        )
        await call.write(_batch(2, "after"))
        await call.done_writing()  # so that a stream that took the batch ends at once
        assert await _status_at_end(call) == UNAUTHENTICATED, await call.details()
        assert "invalid or revoked credential" in await call.details()

        async def stored(task_id: str) -> bool:
            request = tasks_pb2.GetTaskRequest(namespace=NS, task_id=task_id)
            try:
                await tasks.GetTask(request, metadata=bearer(reader), timeout=15)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
                return False
            return True

        assert await stored("before")
        assert not await stored("after")
    line = dev.logged(f"refused /tikk.v1.TaskService/ImportTasks for credential {importer_id}")
    assert " WARNING tikk.server.auth: " in line and "(UNAUTHENTICATED)" in line
    assert importer not in dev.output()


def _success(delivery: worker_pb2.Delivery) -> worker_pb2.RunResultBatch:
    result = worker_pb2.RunResult(
        run_id=uuid.uuid4().hex, delivery=delivery, kind=worker_pb2.RESULT_KIND_SUCCEEDED,
        worker_id="w1",
    )  # fmt: skip
    now_ms = int(time.time() * 1000)
    result.start_time.FromMilliseconds(now_ms - 20)
    result.finish_time.FromMilliseconds(now_ms - 10)
    return worker_pb2.RunResultBatch(results=[result])


async def _state(channel: grpc.aio.Channel, token: str, task_id: str) -> tuple[int, list[str]]:
    """What a result changes: the task's state, and its runs."""
    get = tasks_pb2.GetTaskRequest(namespace=NS, task_id=task_id)
    task = await tasks_pb2_grpc.TaskServiceStub(channel).GetTask(
        get, metadata=bearer(token), timeout=15
    )
    listed = history_pb2.ListTaskRunsRequest(namespace=NS, task_id=task_id)
    runs = await history_pb2_grpc.HistoryServiceStub(channel).ListTaskRuns(
        listed, metadata=bearer(token), timeout=15
    )
    return task.state, [r.run_id for r in runs.runs]


async def test_a_revoked_worker_records_no_result_after_the_revocation(dev: Dev) -> None:
    worker_id, worker = await dev.create("worker", f"worker:{QUEUE}")
    _, writer = await dev.create("writer", f"write:{NS}")
    address = dev.start()
    async with grpc.aio.insecure_channel(address) as channel:
        tasks = tasks_pb2_grpc.TaskServiceStub(channel)
        workers = worker_pb2_grpc.WorkerServiceStub(channel)
        for task_id in ("before", "after"):
            create = tasks_pb2.CreateTaskRequest(namespace=NS, task_id=task_id, queue=QUEUE,
                                                 handler="h")  # fmt: skip
            await tasks.CreateTask(create, metadata=bearer(writer), timeout=15)
        deliveries = await taken_off_queue(
            dev.stack.data_dir / "queue.db", QUEUE, {"before", "after"}
        )
        call = workers.ReportResultBatches(metadata=bearer(worker), timeout=120)
        first = _success(deliveries["before"])
        await call.write(first)
        [ack] = (await call.read()).acks
        assert ack.code == grpc.StatusCode.OK.value[0], ack
        await dev.revoke(worker_id)
        await _until_refused(
            lambda: workers.GetWorkerConfig(worker_pb2.GetWorkerConfigRequest(),
                                            metadata=bearer(worker), timeout=15),
            "the worker's unary calls refused",
        )  # fmt: skip
        await call.write(_success(deliveries["after"]))
        await call.done_writing()
        assert await _status_at_end(call) == UNAUTHENTICATED, await call.details()
        succeeded = (tasks_pb2.TASK_STATE_SUCCEEDED, [first.results[0].run_id])
        assert await _state(channel, writer, "before") == succeeded
        assert await _state(channel, writer, "after") == (tasks_pb2.TASK_STATE_DISPATCHED, [])
    line = dev.logged(
        f"refused /tikk.v1.WorkerService/ReportResultBatches for credential {worker_id}"
    )
    assert " WARNING tikk.server.auth: " in line and "invalid or revoked credential" in line


def test_a_refused_call_is_in_the_server_output_at_warning(tmp_path: Path) -> None:
    """At the default level: an operator sees who is being refused, and why."""
    stack = AuthStack(tmp_path)
    credential_id, token = stack.create("reader", f"read:{NS}")
    dev = Dev(stack, "")
    try:
        address = dev.start()
        with grpc.insecure_channel(address) as channel:
            tasks = tasks_pb2_grpc.TaskServiceStub(channel)
            get = tasks_pb2.GetTaskRequest(namespace=NS, task_id="x")
            create = tasks_pb2.CreateTaskRequest(namespace=NS, queue="q", handler="h")
            with pytest.raises(grpc.RpcError) as anonymous:
                tasks.GetTask(get, timeout=15)
            assert anonymous.value.code() == UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as reader:
                tasks.CreateTask(create, metadata=bearer(token), timeout=15)
            assert reader.value.code() == grpc.StatusCode.PERMISSION_DENIED
        no_credential = dev.logged(
            "refused /tikk.v1.TaskService/GetTask for caller (UNAUTHENTICATED)"
        )
        assert " WARNING tikk.server.auth: " in no_credential
        denied = dev.logged(
            f"refused /tikk.v1.TaskService/CreateTask for credential {credential_id}"
        )
        assert " WARNING " in denied and "(PERMISSION_DENIED): role write" in denied
        assert token not in dev.output()
    finally:
        stack.close()
