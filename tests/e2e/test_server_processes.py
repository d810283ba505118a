"""``tikk server --processes N``: several real server processes on one port, a supervisor.

Which process serves a connection is read from ``/proc``: the test's own client sockets give
their local ports, the server-side sockets of those connections are found in the TCP table,
and a member serves a connection when one of its file descriptors is that socket.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.conftest import Process, read_executions
from tests.waiting import eventually
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

pytestmark = pytest.mark.e2e

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")
_MEMBERS = re.compile(r"^  processes ((?:\d+ ?)+)$")
_ESTABLISHED = "01"
# Connections opened at most while looking for one served by a given member. The kernel picks
# a member per connection by a hash, so each new one has an even chance with two members.
_MAX_CHANNELS = 64


class Group:
    """A ``tikk server|dev --processes N`` supervisor, its members, and client channels."""

    def __init__(self, data_dir: Path, command: str, processes: int, *extra: str) -> None:
        self.data_dir = data_dir
        self.log = data_dir / "executions.jsonl"
        self.supervisor = Process(
            [command, "--processes", str(processes), "--data-dir", str(data_dir),
             "--listen", "127.0.0.1:0", "--shards", "64", "--visibility-timeout", "4s", *extra],
            self.env,
        )  # fmt: skip
        host, port = self.supervisor.wait_for(_LISTENING, timeout=60).groups()
        self.port = int(port)
        self.address = f"{host}:{port}"
        self.members = [int(p) for p in self.supervisor.wait_for(_MEMBERS).group(1).split()]
        self.helpers: list[Process] = []
        self.channels: list[grpc.Channel] = []

    @property
    def env(self) -> dict[str, str]:
        return {"TIKK_E2E_LOG": str(self.log), "PYTHONUNBUFFERED": "1"}

    def start(self, *args: str) -> Process:
        """Another ``tikk`` process on the same data (a worker, a dispatcher)."""
        process = Process(list(args), self.env)
        self.helpers.append(process)
        return process

    def connect(self) -> Any:
        """A TaskService stub on a connection of its own (no subchannel shared with others)."""
        channel = grpc.insecure_channel(self.address, [("grpc.use_local_subchannel_pool", 1)])
        self.channels.append(channel)
        return tasks_pb2_grpc.TaskServiceStub(channel)

    def executed(self, namespace: str) -> set[str]:
        return {e["task_id"] for e in read_executions(self.log) if e["namespace"] == namespace}

    def close(self) -> int:
        for channel in self.channels:
            channel.close()
        for helper in self.helpers:
            helper.stop()
        return self.supervisor.stop(timeout=90)


def _socket_inodes(pid: int) -> set[int]:
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            found.add(int(target[len("socket:[") : -1]))
    return found


def _tcp_connections() -> list[tuple[int, int, int]]:
    """(local port, remote port, socket inode) of every established TCP connection."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _ESTABLISHED:
                local, remote = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
                rows.append((local, remote, int(fields[9])))
    return rows


def serving(group: Group) -> set[int]:
    """The members holding the server end of a connection this test process opened."""
    connections = _tcp_connections()
    ours = _socket_inodes(os.getpid())
    client_ports = {lp for lp, rp, inode in connections if inode in ours and rp == group.port}
    server_ends = {
        inode for lp, rp, inode in connections if lp == group.port and rp in client_ports
    }
    return {pid for pid in group.members if _socket_inodes(pid) & server_ends}


def create_tasks(stub: Any, namespace: str, prefix: str, count: int = 3) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(count)]
    for task_id in ids:
        req = tasks_pb2.CreateTaskRequest(
            namespace=namespace, task_id=task_id, queue="e2e", handler="record", payload=b"x"
        )
        stub.CreateTask(req, timeout=30, wait_for_ready=True)
    return ids


def until_served_by(group: Group, pid: int, namespace: str) -> list[str]:
    """Open connections (creating tasks through each) until ``pid`` serves one of them."""
    created: list[str] = []
    for _ in range(_MAX_CHANNELS):
        created += create_tasks(group.connect(), namespace, f"c{len(group.channels)}")
        if pid in serving(group):
            return created
    raise AssertionError(f"no connection of {_MAX_CHANNELS} reached pid {pid}")


def all_succeeded(stub: Any, namespace: str, ids: list[str]) -> bool:
    def state(task_id: str) -> int:
        req = tasks_pb2.GetTaskRequest(namespace=namespace, task_id=task_id)
        return int(stub.GetTask(req, timeout=30).state)

    return all(state(t) == tasks_pb2.TASK_STATE_SUCCEEDED for t in ids)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    """Two server processes, a separate dispatcher and a worker, on one data directory."""
    g = Group(tmp_path_factory.mktemp("processes"), "server", 2)
    g.start("dispatcher", "--data-dir", str(g.data_dir), "--shards", "64")
    g.start("worker", "tests.e2e.worker_app:worker", "--server", g.address)
    yield g
    g.close()


@pytest.fixture
def ns() -> str:
    return "p-" + uuid.uuid4().hex[:12]


def test_connections_are_served_by_every_process_and_their_tasks_run(group: Group, ns: str) -> None:
    assert len(group.members) == 2 and group.supervisor.proc.pid not in group.members
    created: list[str] = []
    for pid in group.members:
        created += until_served_by(group, pid, ns)
    assert serving(group) == set(group.members)
    eventually(lambda: group.executed(ns) == set(created), timeout=60)
    assert all_succeeded(group.connect(), ns, created)


def _parent_of(pid: int) -> int:
    # The fields after the command name, which is in parentheses and may hold spaces.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


def test_a_killed_process_is_started_again_and_the_service_keeps_answering(
    group: Group, ns: str
) -> None:
    victim = group.members[1]
    os.kill(victim, 9)
    restarted = re.compile(r"process 2 of 2 started again as pid (\d+)")
    successor = int(group.supervisor.wait_for(restarted, timeout=60).group(1))
    assert f"(pid {victim}) exited with code -9" in group.supervisor.output()
    assert successor != victim and _parent_of(successor) == group.supervisor.proc.pid
    group.members[1] = successor
    created = until_served_by(group, successor, ns)
    created += until_served_by(group, group.members[0], ns)
    eventually(lambda: group.executed(ns) == set(created), timeout=60)
    assert all_succeeded(group.connect(), ns, created)


def test_sigterm_stops_every_process_and_the_supervisor_exits_0(tmp_path: Path) -> None:
    g = Group(tmp_path, "server", 3)
    assert len(g.members) == 3
    create_tasks(g.connect(), "p-stop", "before-stop")
    code = g.close()
    assert code == 0, g.supervisor.output()
    assert [pid for pid in g.members if Path(f"/proc/{pid}").exists()] == []
    assert "starting it again" not in g.supervisor.output()
    assert "killed" not in g.supervisor.output()  # each stopped within the grace period


def test_dev_runs_its_dispatcher_and_workers_in_the_group(tmp_path: Path) -> None:
    """``tikk dev --processes 2 --worker``: tasks taken by either process are dispatched by the
    first one's dispatcher and run by its in-process worker."""
    g = Group(tmp_path, "dev", 2, "--worker", "tests.e2e.worker_app:worker")
    try:
        created: list[str] = []
        for pid in g.members:
            created += until_served_by(g, pid, "p-dev")
        eventually(lambda: g.executed("p-dev") == set(created), timeout=60)
        assert all_succeeded(g.connect(), "p-dev", created)
    finally:
        assert g.close() == 0


_FAILED = "process 1 of 2 exited with code {} before it served; no process serves"


@pytest.mark.parametrize(
    ("args", "code", "messages"),
    [
        (["--store", "nosuch://x"], 1, ["unsupported scheme 'nosuch'", _FAILED.format(1)]),
        (["--worker", "no_such:worker"], 4, ["No module named 'no_such'", _FAILED.format(4)]),
        (["--processes", "0"], 2, ["--processes: expected a whole number >= 1, got '0'"]),
    ],
)
def test_a_bad_setting_fails_at_once_with_its_error_and_no_restart(
    tmp_path: Path, args: list[str], code: int, messages: list[str]
) -> None:
    cli = ["dev", "--processes", "2", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0"]
    failing = Process([*cli, *args], {"PYTHONUNBUFFERED": "1"})
    assert failing.proc.wait(timeout=60) == code
    # The supervisor's own line comes last, once its members' output is out.
    eventually(lambda: messages[-1] in failing.output(), timeout=10)
    assert all(m in failing.output() for m in messages), failing.output()
    assert "listening on" not in failing.output()
    assert "starting it again" not in failing.output()
