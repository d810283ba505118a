"""What one process holds against another on the same host: its address (no second server
shares the port of one already serving), its data directory (one dispatching owner), and its
files (readable by its user only). Real ``tikk`` processes on free loopback ports."""

from __future__ import annotations

import re
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.conftest import Process
from tests.waiting import eventually
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

pytestmark = pytest.mark.e2e

_LISTENING = re.compile(r"listening on ([\d.]+:\d+)")
_REFUSED = 1
# Fresh connections opened to see who answers: with a shared port the kernel would hand
# about half of them to the second process.
_CONNECTIONS = 8


class Processes:
    """The ``tikk`` processes of one test, stopped at its end."""

    def __init__(self) -> None:
        self.started: list[Process] = []

    def start(self, *args: str) -> Process:
        process = Process(list(args), {"PYTHONUNBUFFERED": "1"})
        self.started.append(process)
        return process

    def serve(self, *args: str) -> tuple[Process, str]:
        """A process serving the API, and the address it printed."""
        process = self.start(*args)
        return process, process.wait_for(_LISTENING, timeout=60).group(1)

    def refused(self, message: str, *args: str) -> str:
        """The output of a process that must exit with code 1 at start-up, saying
        ``message`` (one that serves instead fails the test when the wait runs out)."""
        process = self.start(*args)
        assert process.proc.wait(timeout=60) == _REFUSED, process.output()
        eventually(lambda: message in process.output(), timeout=10)
        output = process.output()
        assert "Traceback" not in output and "listening on" not in output, output
        return output


@pytest.fixture
def processes() -> Iterator[Processes]:
    p = Processes()
    yield p
    for process in reversed(p.started):
        process.stop(timeout=60)


def dev(data_dir: Path, listen: str = "127.0.0.1:0", *extra: str) -> list[str]:
    return ["dev", "--data-dir", str(data_dir), "--listen", listen, "--shards", "8", *extra]


def in_use(address: str) -> str:
    return f"tikk dev: cannot listen on {address}: address in use by another process"


def create(address: str, task_id: str = "") -> grpc.StatusCode:
    """The status of a CreateTask (a task due now) over a connection of its own."""
    with grpc.insecure_channel(address, [("grpc.use_local_subchannel_pool", 1)]) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)
        request = tasks_pb2.CreateTaskRequest(task_id=task_id, queue="q", handler="h")
        try:
            stub.CreateTask(request, timeout=30)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def state(address: str, task_id: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)
        return int(stub.GetTask(tasks_pb2.GetTaskRequest(task_id=task_id), timeout=30).state)


def dispatched(address: str) -> None:
    """Create a task due now, and wait until a dispatcher handed it to the queue."""
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    assert create(address, task_id) == grpc.StatusCode.OK
    eventually(lambda: state(address, task_id) == tasks_pb2.TASK_STATE_DISPATCHED, 60)


# The address.


def test_a_second_server_on_the_address_is_refused_and_the_first_keeps_its_callers(
    tmp_path: Path, processes: Processes
) -> None:
    first, address = processes.serve(*dev(tmp_path / "a", "127.0.0.1:0", "--auth"))
    processes.refused(in_use(address), *dev(tmp_path / "b", address))
    # Every caller still reaches the server that checks credentials, none the other store.
    answers = {create(address) for _ in range(_CONNECTIONS)}
    assert answers == {grpc.StatusCode.UNAUTHENTICATED}
    assert first.proc.poll() is None


def test_a_group_is_refused_while_a_server_alone_holds_the_port(
    tmp_path: Path, processes: Processes
) -> None:
    _, address = processes.serve("server", "--data-dir", str(tmp_path / "a"), "--listen",
                                 "127.0.0.1:0", "--shards", "8")  # fmt: skip
    output = processes.refused(in_use(address), *dev(tmp_path / "b", address, "--processes", "2"))
    assert "process 1 of 2" not in output  # refused before any member started
    assert create(address) == grpc.StatusCode.OK


def test_a_group_keeps_its_port_and_its_data_dir_from_a_newcomer(
    tmp_path: Path, processes: Processes
) -> None:
    group, address = processes.serve(*dev(tmp_path / "a", "127.0.0.1:0", "--processes", "2"))
    processes.refused(in_use(address), *dev(tmp_path / "b", address))
    # Its supervisor holds the data dir for the member that dispatches.
    owned = f"{tmp_path / 'a'} is owned by pid {group.proc.pid}"
    processes.refused(owned, "dispatcher", "--data-dir", str(tmp_path / "a"), "--shards", "8")
    dispatched(address)
    assert "starting it again" not in group.output()


# The data directory.


def test_a_second_owner_of_a_data_dir_is_refused_and_the_first_keeps_dispatching(
    tmp_path: Path, processes: Processes
) -> None:
    first, address = processes.serve(*dev(tmp_path))
    owned = f"{tmp_path} is owned by pid {first.proc.pid}"
    for newcomer in (dev(tmp_path), ["dispatcher", "--data-dir", str(tmp_path), "--shards", "8"]):
        processes.refused(owned, *newcomer)
    dispatched(address)
    assert "taken over" not in first.output()


def test_an_owner_killed_with_sigkill_does_not_hold_back_its_restart(
    tmp_path: Path, processes: Processes
) -> None:
    first, _ = processes.serve(*dev(tmp_path))
    first.kill9()
    _, address = processes.serve(*dev(tmp_path))
    dispatched(address)


# The files.


def test_the_data_dir_and_every_file_in_it_are_its_users_only(
    tmp_path: Path, processes: Processes
) -> None:
    data = tmp_path / "data"
    _, address = processes.serve(*dev(data))
    dispatched(address)
    found = {str(p.relative_to(data)): stat.S_IMODE(p.stat().st_mode) for p in data.rglob("*")}
    assert {"tikk.db", "tikk.db-wal", "queue.db", "history.db", "owner.lock"} <= set(found)
    wanted = {name: 0o700 if (data / name).is_dir() else 0o600 for name in found}
    assert (stat.S_IMODE(data.stat().st_mode), found) == (0o700, wanted)
