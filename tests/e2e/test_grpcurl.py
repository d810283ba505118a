"""grpcurl, a generic gRPC client with no ``.proto`` files, against a real ``tikk dev``: the
README's recipes ("Any gRPC client: grpcurl") as written, and the reflection version that
answers it.

grpcurl asks ``grpc.reflection.v1`` first and falls back to ``v1alpha`` only when v1 is not
served, so its output alone cannot tell which version answered. The calls go through a small
recording proxy here: v1 must be the only reflection service grpcurl called. A proxy that
refuses v1 (as a server with v1alpha only would) shows the recording sees the fallback.

grpcurl is the one ``scripts/go-client.sh tools`` builds into .tools/bin; without it the test
is skipped, and fails under CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.auth_stack import AuthStack
from tests.e2e.conftest import ROOT, Stack
from tests.services import in_ci

pytestmark = pytest.mark.e2e

GRPCURL = ROOT / ".tools" / "bin" / "grpcurl"
V1 = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
V1ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
SERVICES = {
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
    *(f"tikk.v1.{name}Service" for name in ("Admin", "Bulk", "History", "Schedule", "Task")),
    "tikk.v1.WorkerService",
}


def grpcurl(*args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    """grpcurl with ``args``; ``token`` in its environment as TIKK_TOKEN (for
    ``-expand-headers``), and no other TIKK_TOKEN."""
    if not GRPCURL.exists():
        message = f"{GRPCURL} is missing: build it with `scripts/go-client.sh tools`"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    env = {k: v for k, v in os.environ.items() if k != "TIKK_TOKEN"}
    if token:
        env["TIKK_TOKEN"] = token
    return subprocess.run(
        [str(GRPCURL), *args], env=env, capture_output=True, text=True, timeout=60,
        check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``tikk dev`` (no worker: nothing here runs); its address."""
    stack = Stack(tmp_path_factory.mktemp("grpcurl"))
    yield stack.start_server()
    stack.close()


class RecordingProxy(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """Forwards every call, as bytes, to ``target`` and records the method each call named;
    the methods in ``refused`` it answers UNIMPLEMENTED itself."""

    def __init__(self, target: str, refused: frozenset[str] = frozenset()) -> None:
        self.methods: list[str] = []
        self._lock = threading.Lock()
        self._refused = refused
        self._channel = grpc.insecure_channel(target)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[self])
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        method: str = details.method
        with self._lock:
            self.methods.append(method)
        forward = self._channel.stream_stream(method, None, None)  # bytes, as they came

        def relay(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
            if method in self._refused:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not served here")
            try:
                yield from forward(requests, timeout=30)
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details() or "")

        return grpc.stream_stream_rpc_method_handler(relay)

    def close(self) -> None:
        self._server.stop(None)
        self._channel.close()


def listed(address: str) -> set[str]:
    return set(ok(grpcurl("-plaintext", address, "list")).split())


def test_grpcurl_lists_the_services_through_reflection_v1(dev: str) -> None:
    assert listed(dev) == SERVICES
    proxy = RecordingProxy(dev)
    try:
        assert listed(proxy.address) == SERVICES
        assert proxy.methods == [V1]  # v1 answered: no fallback to v1alpha
    finally:
        proxy.close()
    without_v1 = RecordingProxy(dev, refused=frozenset({V1}))
    try:
        assert listed(without_v1.address) == SERVICES
        assert without_v1.methods == [V1, V1ALPHA]  # the fallback, when v1 is not there
    finally:
        without_v1.close()


def test_the_readme_describe_recipes(dev: str) -> None:
    service = ok(grpcurl("-plaintext", dev, "describe", "tikk.v1.TaskService"))
    assert "tikk.v1.TaskService is a service:" in service
    assert (
        "rpc CreateTask ( .tikk.v1.CreateTaskRequest ) returns ( .tikk.v1.CreateTaskResponse );"
        in service
    )
    imports = "rpc ImportTasks ( stream .tikk.v1.ImportTasksRequest ) returns ( stream "
    assert imports + ".tikk.v1.ImportTasksResponse );" in service
    message = ok(grpcurl("-plaintext", dev, "describe", "tikk.v1.CreateTaskRequest"))
    assert "tikk.v1.CreateTaskRequest is a message:" in message
    for field in (
        "string task_id = 2;",
        "bytes payload = 5;",
        ".google.protobuf.Duration delay = 9;",
    ):
        assert field in message
    # As the README says: a method by its full name is not described.
    method = grpcurl("-plaintext", dev, "describe", "tikk.v1.TaskService.CancelTask")
    assert method.returncode != 0
    assert "Symbol not found" in method.stderr


# The README's create, word for word (its line break inside the JSON included).
CREATE = """{"task_id": "hello-1", "queue": "email", "handler": "send",
  "payload": "aGk=", "delay": "30s"}"""


def test_the_readme_create_get_and_queue_recipes(dev: str) -> None:
    created = json.loads(
        ok(grpcurl("-plaintext", "-d", CREATE, dev, "tikk.v1.TaskService/CreateTask"))
    )
    task = created["task"]
    assert created["created"] is True
    assert (task["namespace"], task["id"], task["queue"], task["handler"], task["payload"]) == (
        "default", "hello-1", "email", "send", "aGk=")  # fmt: skip
    assert task["state"] == "TASK_STATE_SCHEDULED"
    assert _ms(task["due_time"]) - _ms(task["create_time"]) == 30_000
    again = json.loads(
        ok(grpcurl("-plaintext", "-d", CREATE, dev, "tikk.v1.TaskService/CreateTask"))
    )
    assert "created" not in again  # false: the same task, not a second one
    assert again["task"]["create_time"] == task["create_time"]
    got = json.loads(
        ok(
            grpcurl(
                "-plaintext", "-d", '{"task_id": "hello-1"}', dev, "tikk.v1.TaskService/GetTask"
            )
        )
    )
    assert got == task
    paused = grpcurl(
        "-plaintext",
        "-d",
        '{"name": "email", "paused": true}',
        dev,
        "tikk.v1.TaskService/UpdateQueue",
    )
    queue = json.loads(ok(paused))
    assert (queue["name"], queue["paused"]) == ("email", True)


def _ms(rfc3339: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


def test_the_readme_tls_and_token_recipe(tmp_path: Path) -> None:
    """``-cacert ca.pem -H "authorization: Bearer $(cat token)"`` against ``--auth`` over TLS;
    the token reaches grpcurl through its environment (``-expand-headers``), never argv."""
    auth = AuthStack(tmp_path)
    _, token = auth.create("grpcurl", "write:default")
    address = auth.start_server(*auth.tls_args())
    tls = ["-cacert", str(auth.pki().ca_cert)]
    bearer = ["-expand-headers", "-H", "authorization: Bearer ${TIKK_TOKEN}"]
    try:
        assert set(ok(grpcurl(*tls, *bearer, address, "list", token=token)).split()) == SERVICES
        call = [*tls, *bearer, "-d", CREATE, address, "tikk.v1.TaskService/CreateTask"]
        assert json.loads(ok(grpcurl(*call, token=token)))["created"] is True
        get = [
            *tls,
            *bearer,
            "-d",
            '{"task_id": "hello-1"}',
            address,
            "tikk.v1.TaskService/GetTask",
        ]
        assert json.loads(ok(grpcurl(*get, token=token)))["queue"] == "email"
        anonymous = grpcurl(*tls, address, "list")
        assert anonymous.returncode != 0
        assert "Unauthenticated" in anonymous.stderr
    finally:
        auth.close()
