"""A token given to any client of ours arrives at a real gRPC server as ``authorization:
Bearer <token>`` metadata: the Python clients, the CLI and a worker process, on unary and
streaming calls, over TLS and over plaintext loopback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from server.certs import DevPki, make_dev_pki
from tests.e2e.conftest import ROOT, Process
from tests.waiting import eventually
from tikk.client import AsyncClient, Client, Transport, TransportError
from tikk.v1 import tasks_pb2, worker_pb2

pytestmark = pytest.mark.e2e

TOKEN = "tkn-e2e-0123456789abcdef"  # a made-up credential; no server checks it here


@dataclass
class Recorder:
    """Every call's method and ``authorization`` metadata, as the server received them."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, method: str, context: grpc.ServicerContext) -> None:
        found = [v for k, v in context.invocation_metadata() if k == "authorization"]
        with self.lock:
            self.calls.append((method, str(found[0]) if found else ""))

    def seen(self, method: str) -> list[str]:
        with self.lock:
            return [auth for name, auth in self.calls if name == method]


def _handlers(recorder: Recorder) -> list[grpc.GenericRpcHandler[Any, Any]]:
    return [_task_service(recorder), _worker_service(recorder)]


def _task_service(recorder: Recorder) -> grpc.GenericRpcHandler[Any, Any]:
    def get_task(request: tasks_pb2.GetTaskRequest, context: grpc.ServicerContext) -> Any:
        recorder.record("GetTask", context)
        return tasks_pb2.Task(id=request.task_id, queue="q", handler="h")

    def create_tasks(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        recorder.record("CreateTasks", context)
        return tasks_pb2.CreateTasksResponse(accepted=sum(1 for _ in requests))

    tasks = {
        "GetTask": grpc.unary_unary_rpc_method_handler(
            get_task, tasks_pb2.GetTaskRequest.FromString, tasks_pb2.Task.SerializeToString
        ),
        "CreateTasks": grpc.stream_unary_rpc_method_handler(
            create_tasks,
            tasks_pb2.CreateTasksRequest.FromString,
            tasks_pb2.CreateTasksResponse.SerializeToString,
        ),
    }
    return grpc.method_handlers_generic_handler("tikk.v1.TaskService", tasks)


def _worker_service(recorder: Recorder) -> grpc.GenericRpcHandler[Any, Any]:
    def worker_config(request: Any, context: grpc.ServicerContext) -> Any:
        recorder.record("GetWorkerConfig", context)
        context.abort(grpc.StatusCode.UNAVAILABLE, "not serving workers here")

    def report(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        recorder.record("ReportResultBatches", context)
        for _ in requests:
            yield worker_pb2.ResultAckBatch()

    worker = {
        "GetWorkerConfig": grpc.unary_unary_rpc_method_handler(
            worker_config,
            worker_pb2.GetWorkerConfigRequest.FromString,
            worker_pb2.GetWorkerConfigResponse.SerializeToString,
        ),
        "ReportResultBatches": grpc.stream_stream_rpc_method_handler(
            report,
            worker_pb2.RunResultBatch.FromString,
            worker_pb2.ResultAckBatch.SerializeToString,
        ),
    }
    return grpc.method_handlers_generic_handler("tikk.v1.WorkerService", worker)


@dataclass
class Recording:
    tls_address: str
    plain_address: str
    recorder: Recorder
    pki: DevPki


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recording]:
    """A real gRPC server on two loopback ports, one TLS, one plaintext."""
    pki = make_dev_pki(tmp_path_factory.mktemp("pki"))
    recorder = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=_handlers(recorder))
    credentials = grpc.ssl_server_credentials(
        [(pki.server_key.read_bytes(), pki.server_cert.read_bytes())]
    )
    tls_port = server.add_secure_port("127.0.0.1:0", credentials)
    plain_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield Recording(f"127.0.0.1:{tls_port}", f"127.0.0.1:{plain_port}", recorder, pki)
    server.stop(grace=None)


def _tls(recording: Recording, token: str = "") -> Transport:
    return Transport(ca_file=str(recording.pki.ca_cert), token=token)


def test_the_clients_send_the_token_on_unary_calls(recording: Recording) -> None:
    transport = _tls(recording, token=TOKEN)
    with Client(recording.tls_address, transport=transport) as client:
        assert client.get_task("sync-1").id == "sync-1"

    async def get() -> str:
        async with AsyncClient(recording.tls_address, transport=transport) as client:
            return (await client.get_task("async-1")).id

    assert asyncio.run(get()) == "async-1"
    assert recording.recorder.seen("GetTask")[-2:] == [f"Bearer {TOKEN}"] * 2


def test_a_plaintext_loopback_channel_carries_the_token_too(recording: Recording) -> None:
    with Client(recording.plain_address, transport=Transport(token=TOKEN)) as client:
        client.get_task("plain-1")
    assert recording.recorder.seen("GetTask")[-1] == f"Bearer {TOKEN}"


def test_streaming_calls_carry_the_token(recording: Recording) -> None:
    transport = _tls(recording, token=TOKEN)
    with transport.channel(recording.tls_address) as channel:
        create = channel.stream_unary(
            "/tikk.v1.TaskService/CreateTasks",
            request_serializer=tasks_pb2.CreateTasksRequest.SerializeToString,
            response_deserializer=tasks_pb2.CreateTasksResponse.FromString,
        )
        answer = create(iter([tasks_pb2.CreateTasksRequest()] * 2), timeout=10)
        assert answer.accepted == 2

    async def report() -> int:
        # As the worker's result stream does: one long call, written to.
        async with transport.aio_channel(recording.tls_address) as channel:
            call = channel.stream_stream(
                "/tikk.v1.WorkerService/ReportResultBatches",
                request_serializer=worker_pb2.RunResultBatch.SerializeToString,
                response_deserializer=worker_pb2.ResultAckBatch.FromString,
            )()  # type: ignore[call-arg]  # grpc-stubs lacks the writable call of grpc.aio
            await call.write(worker_pb2.RunResultBatch())
            await call.done_writing()
            return len([ack async for ack in call])

    assert asyncio.run(report()) == 1
    assert recording.recorder.seen("CreateTasks")[-1] == f"Bearer {TOKEN}"
    assert recording.recorder.seen("ReportResultBatches")[-1] == f"Bearer {TOKEN}"


def test_without_a_token_nothing_is_sent(recording: Recording) -> None:
    with Client(recording.tls_address, transport=_tls(recording)) as client:
        client.get_task("anonymous")
    assert recording.recorder.seen("GetTask")[-1] == ""


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        check=False,
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k != "TIKK_TOKEN"}, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_the_cli_sends_the_token_from_the_environment_or_a_file(
    recording: Recording, tmp_path: Path
) -> None:
    over_tls = ["--server", recording.tls_address, "--tls-ca", str(recording.pki.ca_cert)]
    from_env = _cli("task", "get", "cli-env", *over_tls, env={"TIKK_TOKEN": TOKEN})
    assert from_env.returncode == 0, from_env.stderr
    assert recording.recorder.seen("GetTask")[-1] == f"Bearer {TOKEN}"

    token_file = tmp_path / "token"
    token_file.write_text("tkn-from-file\n")
    token_file.chmod(0o600)
    from_file = _cli("task", "get", "cli-file", *over_tls, "--token-file", str(token_file), env={})
    assert from_file.returncode == 0, from_file.stderr
    assert recording.recorder.seen("GetTask")[-1] == "Bearer tkn-from-file"
    assert TOKEN not in from_env.stdout + from_env.stderr


def test_the_cli_refuses_a_token_in_clear_to_another_host(recording: Recording) -> None:
    refused = _cli("task", "get", "x", "--server", "192.0.2.1:7070", env={"TIKK_TOKEN": TOKEN})
    assert refused.returncode == 2
    assert "TLS" in refused.stderr
    assert TOKEN not in refused.stderr


def test_the_worker_refuses_a_token_in_clear_or_an_unreadable_ca_at_start(
    tmp_path: Path,
) -> None:
    target = ["worker", "tests.e2e.worker_app:worker"]
    in_clear = _cli(*target, "--server", "192.0.2.1:7070", env={"TIKK_TOKEN": TOKEN})
    assert in_clear.returncode == 2
    assert "TLS" in in_clear.stderr
    assert TOKEN not in in_clear.stdout + in_clear.stderr
    no_ca = _cli(*target, "--tls-ca", str(tmp_path / "absent.pem"), env={})
    assert no_ca.returncode == 2
    assert "absent.pem" in no_ca.stderr


def test_a_worker_process_sends_the_token(recording: Recording) -> None:
    worker = Process(
        ["worker", "tests.e2e.worker_app:worker", "--server", recording.tls_address,
         "--tls-ca", str(recording.pki.ca_cert)],
        {"TIKK_TOKEN": TOKEN, "TIKK_E2E_LOG": os.devnull, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        eventually(lambda: recording.recorder.seen("GetWorkerConfig"), timeout=30)
    finally:
        worker.stop()
    assert set(recording.recorder.seen("GetWorkerConfig")) == {f"Bearer {TOKEN}"}
    assert TOKEN not in worker.output()


def test_a_token_is_not_sent_in_clear_to_another_host() -> None:
    with pytest.raises(TransportError, match="TLS"):
        Transport(token=TOKEN).channel("192.0.2.1:7070")
    assert TOKEN not in repr(Transport(token=TOKEN))
