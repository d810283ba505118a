"""Real processes for end-to-end tests: ``tikk dev`` on a free port and ``tikk worker``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dispatcher.pacing import FIRE_WINDOW_MS
from tikk.settings import DispatchSettings
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
# How long before its due time a task may be handed to its queue by default: the lead and the
# fire batch's window (``dispatcher.pacing``). Its worker still starts it at due.
EARLIEST_MS = DispatchSettings().lead_ms + FIRE_WINDOW_MS
_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")


class Process:
    """A child process whose output is collected (and echoed on failure)."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.args = args
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", *args],
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        # Closed here, at its end (the process and any child holding it gone): nothing else
        # reads it, and a pipe left to the garbage collector is a ResourceWarning.
        with self.proc.stdout as out:
            for line in out:
                self.lines.append(line.rstrip())

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := pattern.search(line):
                    return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)  # the poll interval of this wait
        raise AssertionError(f"{self.args} never printed {pattern.pattern!r}:\n" + self.output())

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


def read_executions(log: Path) -> list[dict[str, Any]]:
    """The runs the e2e workers logged, one JSON line each. A worker may be writing a line
    while it is read: a last line without its newline is not complete yet, so is left out."""
    if not log.exists():
        return []
    text = log.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line]


class Stack:
    """``tikk dev`` (server + dispatcher) and worker processes on one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.log = data_dir / "executions.jsonl"
        self.server: Process | None = None
        self.workers: list[Process] = []
        self.address = ""
        self._channel: grpc.Channel | None = None

    @property
    def env(self) -> dict[str, str]:
        return {"TIKK_E2E_LOG": str(self.log), "PYTHONUNBUFFERED": "1"}

    def start_server(self) -> str:
        self.server = Process(
            [
                "dev",
                "--data-dir",
                str(self.data_dir),
                "--listen",
                "127.0.0.1:0",
                "--shards",
                "64",
                "--visibility-timeout",
                "4s",
            ],
            self.env,
        )
        port = self.server.wait_for(_LISTENING).group(1)
        self.address = f"127.0.0.1:{port}"
        if self._channel is not None:
            self._channel.close()
        self._channel = grpc.insecure_channel(self.address)
        return self.address

    def start_worker(self, app: str = "tests.e2e.worker_app:worker") -> Process:
        w = Process(["worker", app, "--server", self.address], self.env)
        self.workers.append(w)
        return w

    @property
    def tasks(self) -> Any:
        return tasks_pb2_grpc.TaskServiceStub(self._channel)

    @property
    def history(self) -> Any:
        return history_pb2_grpc.HistoryServiceStub(self._channel)

    def executions(self) -> list[dict[str, Any]]:
        return read_executions(self.log)

    def runs(self, namespace: str, task_id: str) -> list[history_pb2.Run]:
        req = history_pb2.ListTaskRunsRequest(namespace=namespace, task_id=task_id)
        return list(reversed(self.history.ListTaskRuns(req, timeout=10).runs))

    def task(self, namespace: str, task_id: str) -> tasks_pb2.Task:
        req = tasks_pb2.GetTaskRequest(namespace=namespace, task_id=task_id)
        t: tasks_pb2.Task = self.tasks.GetTask(req, timeout=10)
        return t

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        if self.server is not None:
            self.server.stop()
        if self._channel is not None:
            self._channel.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("stack"))
    s.start_server()
    s.start_worker()
    yield s
    s.close()


@pytest.fixture
def ns() -> str:
    """A namespace of its own for each test, so tests sharing a stack do not see each other."""
    return "t-" + uuid.uuid4().hex[:12]
