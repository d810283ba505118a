"""The cluster under test: real ``tikk`` processes on the real stack.

One server on a fixed port (chosen free up front, so a restarted server comes back where
workers and the client look for it), dispatchers with ZooKeeper ownership and a short session,
and workers running ``devtools.faults.worker_app``. The run has a keyspace, a Kafka topic
prefix and a ZooKeeper chroot of its own.

The processes run a snapshot of the checkout's packages taken when the run begins
(``snapshot_code``), so that every incarnation of every process runs the same code even while
the working tree is being edited; the snapshot can also be of a committed revision.

Every process is started in a process group of its own (so a signal reaches all of it) and
asks the kernel to kill it when the thread that started it ends (``PR_SET_PDEATHSIG``, set by a
one-line shim that then ``exec``s the real command, so the suite never forks while gRPC threads
run): start them from a thread that lives as long as the run (the main thread), and a suite
that dies takes its cluster with it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc

from devtools.faults.records import Crash
from devtools.faults.worker_app import LOG_ENV
from devtools.stack import login
from server.certs import DevPki, make_dev_pki
from tikk.client.transport import Transport
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.drivers.cassandra_schema import Migration, run_migrations
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("devtools.faults")
# PR_SET_PDEATHSIG (1) with SIGKILL (9), then the real command: the setting survives exec.
_DIE_WITH_PARENT = (
    "import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
SERVER = "server"


def server_roles(count: int) -> list[str]:
    """The roles of ``count`` servers: ``server`` alone, else ``server-0``, ``server-1``..."""
    return [SERVER] if count == 1 else [f"{SERVER}-{i}" for i in range(count)]


# What the processes import: tikk's packages, and this suite's worker (always the tree's).
PACKAGES = ("tikk", "history", "dispatcher", "server", "worker_sdk")
SUITE_PACKAGE = "devtools"
_READY = {
    "server": re.compile(r"listening on [\d.]+:(\d+)"),
    "dispatcher": re.compile("dispatcher running"),
}


class ClusterError(Exception):
    """A process of the cluster could not be started."""


def snapshot_code(dest: Path, git_rev: str | None = None) -> Path:
    """Copy the packages the processes import into ``dest`` (from the working tree, or as
    committed at ``git_rev``); returns ``dest``. Processes started there import these copies
    (the current directory comes first on ``sys.path``)."""
    if git_rev is None:
        _copy_tree(dest, PACKAGES)
    else:
        _extract_revision(dest, git_rev)
    _copy_tree(dest, (SUITE_PACKAGE,))
    return dest


def describe_code(git_rev: str | None) -> str:
    """Which code a snapshot holds: the commit (resolved, since a name like HEAD moves), and
    for the working tree whether tikk's packages had uncommitted changes."""
    try:
        commit = _git("rev-parse", "--short", f"{git_rev or 'HEAD'}^{{commit}}")
    except ClusterError:
        return git_rev or "the working tree (no git history)"
    if git_rev is not None:
        return f"commit {commit} ({git_rev})"
    changed = _git("status", "--porcelain", "--", *PACKAGES)
    return f"the working tree at {commit}" + (" with uncommitted changes" if changed else "")


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ClusterError(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _copy_tree(dest: Path, packages: tuple[str, ...]) -> None:
    for package in packages:
        shutil.copytree(
            ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__")
        )


def _extract_revision(dest: Path, git_rev: str) -> None:
    """The packages as committed at ``git_rev`` (``git archive``; the tree is not touched)."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", git_rev, *PACKAGES],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise ClusterError(f"git archive {git_rev} failed: {archive.stderr.decode()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")


def free_ports(count: int) -> tuple[int, ...]:
    """``count`` different TCP ports on loopback that nothing listens on right now."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return tuple(int(s.getsockname()[1]) for s in sockets)


@dataclass(frozen=True)
class ClusterConfig:
    """Where the cluster's backends are, and its size and names."""

    cassandra: str
    kafka: str
    zookeeper: str
    tag: str
    workdir: Path
    # One port per server (all on loopback); several servers stand behind one list of
    # addresses, which the workers and the suite's clients are given.
    ports: tuple[int, ...]
    code_dir: Path = ROOT
    shards: int = 32
    session_timeout_s: int = 4
    dispatchers: int = 2
    workers: int = 2
    # Serve TLS with a development PKI under the workdir; workers and clients trust its CA.
    tls: bool = False
    # Replicas of the keyspace and the topics: 3 on the replicated stack.
    replicas: int = 1

    @property
    def keyspace(self) -> str:
        return f"tikk_faults_{self.tag}"

    @property
    def topic_prefix(self) -> str:
        return f"faults{self.tag}."

    @property
    def chroot(self) -> str:
        return f"/tikk-faults-{self.tag}"

    @property
    def address(self) -> str:
        """Every server's address, comma-separated (``tikk.client.server_list``)."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    @property
    def pki(self) -> DevPki:
        """Where the PKI of a TLS cluster is (``Cluster`` makes it)."""
        return DevPki.in_directory(self.workdir / "pki")

    @property
    def transport(self) -> Transport:
        """How the suite's clients reach the server."""
        return Transport(ca_file=str(self.pki.ca_cert)) if self.tls else Transport()

    def serve_tls_args(self) -> list[str]:
        pki = self.pki
        return ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]

    @property
    def start_log(self) -> Path:
        return self.workdir / "starts.jsonl"

    @property
    def store_url(self) -> str:
        """The run's keyspace, with the stack's login."""
        return login(f"cassandra://{self.cassandra}/{self.keyspace}")

    def backend_args(self) -> list[str]:
        """The backend options every ``tikk`` process of the cluster is started with."""
        cassandra = self.store_url
        return [
            "--store",
            cassandra,
            "--history",
            cassandra,
            "--queue",
            login(
                f"kafka://{self.kafka}?prefix={self.topic_prefix}&partitions=4"
                f"&replication={self.replicas}"
            ),
            "--ownership",
            login(f"zk://{self.zookeeper}{self.chroot}"),
            "--session-timeout",
            f"{self.session_timeout_s}s",
            "--shards",
            str(self.shards),
        ]


# What a rolling run's live migration adds: a column to the busiest table (the change that
# breaks a statement reading ``SELECT *`` or a row type cached by its columns) and a table.
LIVE_MIGRATION = Migration(
    "faults",
    1,
    "a column and a table added while tikk serves",
    (
        "ALTER TABLE tasks ADD IF NOT EXISTS faults_note text",
        "CREATE TABLE IF NOT EXISTS faults_notes (id text PRIMARY KEY, note text)",
    ),
)


class Member:
    """One role of the cluster (``server``, ``dispatcher-0``, ``worker-1`` ...): the process
    that plays it now, restartable; each incarnation logs to a file of its own."""

    def __init__(self, role: str, args: list[str], config: ClusterConfig) -> None:
        self.role = role
        self.args = args
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnation = 0
        self._out: IO[bytes] | None = None

    @property
    def kind(self) -> str:
        return self.role.split("-")[0]

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    @property
    def log_path(self) -> Path:
        return self.config.workdir / "logs" / f"{self.role}.{self.incarnation}.log"

    def start(self) -> None:
        """Start a new incarnation (the previous one must be gone)."""
        self.incarnation += 1
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._out = open(self.log_path, "ab")  # noqa: SIM115 - closed by kill9
        env = {
            **os.environ,
            LOG_ENV: str(self.config.start_log),
            "PYTHONUNBUFFERED": "1",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _DIE_WITH_PARENT, "-m", "server.cli", *self.args],
            cwd=self.config.code_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Wait for the role's ready line (server, dispatcher); workers print none."""
        pattern = _READY.get(self.kind)
        if pattern is None:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pattern.search(self.log_path.read_text(errors="replace")):
                return
            if self.proc is None or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise ClusterError(f"{self.role} did not become ready:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return "(no output)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the whole process group of the current incarnation."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill9(self) -> int:
        """``kill -9`` the process group; returns the pid that was killed."""
        pid = self.pid
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
        self._close_output()
        return pid

    def terminate(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, as a supervisor stopping it does, and wait until it has exited (killed if
        it has not within ``timeout_s``); returns its pid."""
        pid = self.pid
        self.signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                return self.kill9()
        self._close_output()
        return pid

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self) -> None:
        """Gone for good: continued if paused, then killed."""
        self.resume()
        self.kill9()

    def _close_output(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


def last_line(path: Path, limit: int = 300) -> str:
    """The last non-empty line of the log at ``path`` (at most ``limit`` characters), or ""."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


class Cluster:
    """The server, the dispatchers and the workers of one run."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        backend = config.backend_args()
        # Servers and dispatchers check and sign delivery tokens with one keys file.
        keys = ["--delivery-keys", str(config.workdir / "delivery-keys")]
        server = ["server", *backend, *keys]
        worker = ["worker", "devtools.faults.worker_app:worker", "--server", config.address]
        if config.tls:
            make_dev_pki(config.pki.ca_cert.parent)
            server += config.serve_tls_args()
            worker += ["--tls-ca", str(config.pki.ca_cert)]
        self.members = {
            role: Member(role, [*server, "--listen", f"127.0.0.1:{port}"], config)
            for role, port in zip(server_roles(len(config.ports)), config.ports, strict=True)
        }
        self.crashes: list[Crash] = []
        for i in range(config.dispatchers):
            role = f"dispatcher-{i}"
            self.members[role] = Member(role, ["dispatcher", *backend, *keys], config)
        for i in range(config.workers):
            self.members[f"worker-{i}"] = Member(f"worker-{i}", worker, config)

    def roles(self, kind: str) -> list[str]:
        """The roles of one kind: ``server``, ``dispatcher`` or ``worker``."""
        return [r for r, m in self.members.items() if m.kind == kind]

    def migrate(self, timeout_s: float = 180.0) -> None:
        """Create the run's keyspace and schema (``tikk migrate``)."""
        replication = self.replication()
        args = [
            sys.executable,
            "-m",
            "server.cli",
            "migrate",
            *self.config.backend_args(),
            "--replication",
            replication,
        ]
        done = subprocess.run(
            args,
            cwd=self.config.code_dir,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise ClusterError(f"tikk migrate failed:\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        """Migrate, then start the server, the dispatchers and the workers, in that order."""
        self.migrate()
        for role in self.roles("server"):
            self.restart(role)
        for role in self.roles("dispatcher"):
            self.restart(role)
        for role in self.roles("worker"):
            self.restart(role)

    def restart(self, role: str, attempts: int = 5) -> None:
        """Start ``role`` again and wait until it is ready. The server binds the same port,
        which may take a moment to be free after a kill: retried a few times."""
        member = self.members[role]
        for attempt in range(attempts):
            member.start()
            try:
                member.wait_ready()
                return
            except ClusterError:
                member.kill9()
                if attempt == attempts - 1:
                    raise
                time.sleep(1.0)

    def kill9(self, role: str) -> int:
        return self.members[role].kill9()

    def terminate(self, role: str) -> int:
        return self.members[role].terminate()

    def migrate_live(self) -> list[str]:
        """Apply ``LIVE_MIGRATION`` to the run's keyspace while tikk serves it, as an
        operator's ``tikk migrate`` of a new version does; the steps applied."""
        url = login(f"cassandra://{self.config.cassandra}/{self.config.keyspace}")
        session = CassandraSession(CassandraConfig.from_url(url))
        session.connect()
        try:
            applied = run_migrations(session, [LIVE_MIGRATION], self.replication())
        finally:
            session.shutdown()
        return [f"{m.component} {m.version}" for m in applied]

    def replication(self) -> str:
        return f"{{'class': 'SimpleStrategy', 'replication_factor': {self.config.replicas}}}"

    def pause(self, role: str) -> None:
        self.members[role].pause()

    def resume(self, role: str) -> None:
        self.members[role].resume()

    def pause_queue(self, queue: str, paused: bool, timeout_s: float = 60.0) -> None:
        """Pause or resume ``queue`` through the server, as an operator does: waiting for
        the server if it is restarting, and asking again while it answers UNAVAILABLE (its
        store is coming back), for ``timeout_s`` in all."""
        request = tasks_pb2.UpdateQueueRequest(name=queue, paused=paused)
        deadline = time.monotonic() + timeout_s
        with self.config.transport.channel(self.config.address) as channel:
            stub: Any = tasks_pb2_grpc.TaskServiceStub(channel)
            while True:
                left = max(1.0, deadline - time.monotonic())
                try:
                    stub.UpdateQueue(request, timeout=left, wait_for_ready=True)
                    return
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)

    def revive_crashed(self) -> list[Crash]:
        """Start again every role whose process ended although no fault hit it (the nemesis
        kills and restarts in the same thread, so none is seen between its kill and its
        restart), as a supervisor would, so that one crash shows as a crash and not as every
        task that would have run after it. Returns the crashes found now (also kept in
        ``crashes``); a role that will not start again is found again next time."""
        found = []
        for role, m in self.members.items():
            if m.proc is None or (code := m.proc.poll()) is None:
                continue
            at_ms = time.time_ns() // 1_000_000
            log.error("%s exited with code %s on its own; starting it again", role, code)
            m.kill9()  # reaps it and closes its log
            crash = Crash(role, code, at_ms, str(m.log_path), last_line(m.log_path))
            found.append(crash)
            try:
                self.restart(role)
            except ClusterError as exc:
                log.error("%s did not start again: %s", role, exc)
        self.crashes += found
        return found

    def exited(self) -> list[str]:
        """Roles whose current process ended although nobody killed it (a crash)."""
        return [
            f"{role} exited with code {m.proc.returncode} (log {m.log_path})"
            for role, m in self.members.items()
            if m.proc is not None and m.proc.poll() is not None
        ]

    def close(self) -> None:
        """Kill every process of the cluster (continuing paused ones first)."""
        for member in reversed(self.members.values()):
            with contextlib.suppress(Exception):
                member.stop()
