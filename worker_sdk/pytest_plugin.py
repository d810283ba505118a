"""A pytest fixture for end-to-end tests of a worker: ``tikk_dev`` starts an embedded tikk
(``tikk dev``: server, dispatcher and queue on SQLite files in a temporary folder) on a free
loopback port, once per test module, and stops it afterwards::

    pytest_plugins = ["worker_sdk.pytest_plugin"]

    async def test_welcome_mail_is_sent(tikk_dev):
        with tikk_dev.client() as client:
            client.create_task(TaskSpec("email", "send_welcome", Welcome("a@b.c", "Ada"),
                                        task_id="w-1"))
        await tikk_dev.work(worker, until=lambda: tikk_dev.finished("w-1"))
        assert tikk_dev.task("w-1").state == tasks_pb2.TASK_STATE_SUCCEEDED

The server is a real process (the ``tikk`` of this installation), so the test goes through
gRPC, the dispatcher and the queue as production does; only the storage is embedded.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tikk.v1 import tasks_pb2
from worker_sdk.worker import Worker

_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")
_START_TIMEOUT_S = 60.0
_FINISHED = (
    tasks_pb2.TASK_STATE_SUCCEEDED,
    tasks_pb2.TASK_STATE_DEAD_LETTERED,
    tasks_pb2.TASK_STATE_CANCELLED,
)


class TikkDev:
    """A running ``tikk dev`` (see the module): its ``address`` and helpers for a test."""

    def __init__(self, data_dir: Path, *extra_args: str) -> None:
        self.data_dir = data_dir
        self.output: list[str] = []
        args = ["dev", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *extra_args]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        self.address = f"127.0.0.1:{self._port()}"

    def _read(self) -> None:
        assert self._proc.stdout is not None
        with self._proc.stdout as out:
            for line in out:
                self.output.append(line.rstrip())

    def _port(self) -> str:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline and self._proc.poll() is None:
            for line in list(self.output):
                if m := _LISTENING.search(line):
                    return m.group(1)
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("tikk dev did not start:\n" + "\n".join(self.output[-30:]))

    def client(self, namespace: str = "default") -> Any:
        """A ``tikk.client.Client`` of this server (close it, or use it in ``with``)."""
        from tikk.client import Client

        return Client(self.address, namespace=namespace)

    def task(self, task_id: str, namespace: str = "default") -> tasks_pb2.Task:
        with self.client(namespace) as client:
            found: tasks_pb2.Task = client.get_task(task_id)
            return found

    def finished(self, task_id: str, namespace: str = "default") -> bool:
        """Whether the task succeeded, was dead-lettered or cancelled."""
        return self.task(task_id, namespace).state in _FINISHED

    async def work(
        self, worker: Worker, *, until: Callable[[], bool], timeout_s: float = 30.0
    ) -> int:
        """Run ``worker`` against this server until ``until()`` is true (asked every 0.1 s,
        from a thread); ``TimeoutError`` after ``timeout_s``. Returns the results recorded."""
        stop = asyncio.Event()
        running = asyncio.create_task(worker.run(self.address, stop=stop))
        try:
            async with asyncio.timeout(timeout_s):
                while not await asyncio.to_thread(until):
                    if running.done():
                        return await running  # it ended (or raised) by itself
                    await asyncio.sleep(0.1)
        finally:
            stop.set()
        return await running

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)


@pytest.fixture(scope="module")
def tikk_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TikkDev]:
    """An embedded tikk for this test module (see the module)."""
    dev = TikkDev(tmp_path_factory.mktemp("tikk-dev"))
    try:
        yield dev
    finally:
        dev.stop()
