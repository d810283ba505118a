"""The fuzzer's side of the wire: a real tikk server process, the RPCs it serves (read from
the service descriptors), and one call of any RPC with requests given as bytes.

``Connection`` is the one place that builds the channel and the call metadata, so a run
against a server with ``--auth`` (a bearer token) or TLS (a root certificate) changes only it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import grpc
from google.protobuf.descriptor import Descriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc

import tikk.v1
from devtools.fuzz.messages import SEEDED_HANDLER, SEEDED_QUEUE, SEEDED_SCHEDULE, SEEDED_TASK
from tikk.v1 import schedules_pb2, schedules_pb2_grpc, tasks_pb2, tasks_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")
# Statuses no input may produce: UNKNOWN and INTERNAL are unhandled errors, DEADLINE_EXCEEDED a
# call that hung, UNIMPLEMENTED an RPC of the contract the server does not serve.
FORBIDDEN = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
# Generous: the embedded store answers in milliseconds; this only catches a call that hangs.
CALL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Rpc:
    """One method of a tikk service, as its descriptor describes it."""

    path: str  # /tikk.v1.TaskService/CreateTask
    request: Descriptor
    client_streaming: bool
    server_streaming: bool


def all_rpcs() -> list[Rpc]:
    """Every RPC of every service in ``tikk.v1``; a new proto file or method joins by itself."""
    found = []
    for info in pkgutil.iter_modules(tikk.v1.__path__):
        if not info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(f"tikk.v1.{info.name}")
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                found.append(
                    Rpc(
                        f"/{service.full_name}/{m.name}",
                        m.input_type,
                        m.client_streaming,
                        m.server_streaming,
                    )
                )
    return sorted(found, key=lambda r: r.path)


@dataclass(frozen=True)
class Connection:
    """How to reach the server and as whom. ``token`` travels as ``authorization: Bearer``
    metadata; ``root_certificates`` turns TLS on."""

    address: str
    token: str = field(default="", repr=False)
    root_certificates: bytes | None = field(default=None, repr=False)

    def channel(self) -> grpc.Channel:
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        if self.root_certificates is None:
            return grpc.insecure_channel(self.address, options=options)
        creds = grpc.ssl_channel_credentials(root_certificates=self.root_certificates)
        return grpc.secure_channel(self.address, creds, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


def call(
    channel: grpc.Channel, conn: Connection, rpc: Rpc, requests: Sequence[bytes]
) -> grpc.StatusCode:
    """Send ``requests`` (serialized messages or any bytes) to ``rpc``; the final status. A
    unary RPC takes the first request; a server stream is read to its end. No serializers:
    requests go out as the bytes given."""
    md, timeout = conn.metadata(), CALL_TIMEOUT_S
    try:
        if rpc.client_streaming and rpc.server_streaming:
            for _ in channel.stream_stream(rpc.path, None, None)(
                iter(requests), timeout=timeout, metadata=md
            ):
                pass
        elif rpc.client_streaming:
            channel.stream_unary(rpc.path, None, None)(iter(requests), timeout=timeout, metadata=md)
        elif rpc.server_streaming:
            for _ in channel.unary_stream(rpc.path, None, None)(
                requests[0], timeout=timeout, metadata=md
            ):
                pass
        else:
            channel.unary_unary(rpc.path, None, None)(requests[0], timeout=timeout, metadata=md)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


def seed(channel: grpc.Channel, conn: Connection) -> None:
    """Store what the generated requests name now and then (see ``messages.SEEDED_TASK``), so
    that reads, cancels, updates and backfills meet a real task and schedule."""
    md = conn.metadata()
    task = tasks_pb2.CreateTaskRequest(
        task_id=SEEDED_TASK, queue=SEEDED_QUEUE, handler=SEEDED_HANDLER, payload=b"x"
    )
    task.delay.FromSeconds(3_600)
    tasks_pb2_grpc.TaskServiceStub(channel).CreateTask(task, timeout=CALL_TIMEOUT_S, metadata=md)
    schedule = schedules_pb2.Schedule(
        id=SEEDED_SCHEDULE, queue=SEEDED_QUEUE, handler=SEEDED_HANDLER,
        spec=schedules_pb2.ScheduleSpec(cron="* * * * *"),
    )  # fmt: skip
    request = schedules_pb2.CreateScheduleRequest(schedule=schedule)
    schedules_pb2_grpc.ScheduleServiceStub(channel).CreateSchedule(
        request, timeout=CALL_TIMEOUT_S, metadata=md
    )


def serving(channel: grpc.Channel, conn: Connection) -> bool:
    """Whether the server answers its health check with SERVING."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=10, metadata=conn.metadata())
    except grpc.RpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


class ServerProcess:
    """``tikk dev`` (embedded backends) on a free loopback port, in ``data_dir``; ``args`` are
    added to its command line (e.g. ``--auth`` with its credential options)."""

    def __init__(self, data_dir: Path, args: Sequence[str] = ()) -> None:
        self._command = [
            sys.executable, "-m", "server.cli", "dev", "--data-dir", str(data_dir),
            "--listen", "127.0.0.1:0", "--shards", "16", *args,
        ]  # fmt: skip
        self.lines: list[str] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ServerProcess:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        self._proc = subprocess.Popen(
            self._command, cwd=ROOT, env=env, text=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        with self._proc.stdout as out:  # closed at its end, not left to the garbage collector
            for line in out:
                self.lines.append(line.rstrip())

    def address(self, timeout_s: float = 60.0) -> str:
        """``127.0.0.1:<port>`` once the server says it listens."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.alive():
            for line in list(self.lines):
                if m := _LISTENING.search(line):
                    return f"127.0.0.1:{m.group(1)}"
            time.sleep(0.05)
        raise RuntimeError("the server did not start:\n" + self.output())

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def output(self, last: int = 60) -> str:
        return "\n".join(self.lines[-last:])

    def tracebacks(self) -> list[str]:
        """Each traceback the server printed (with the lines after it): an exception nothing
        handled, even where the caller got a proper status (a background task, a stream)."""
        return [
            "\n".join(self.lines[i : i + 30])
            for i, line in enumerate(self.lines)
            if line.startswith("Traceback")
        ]

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)
