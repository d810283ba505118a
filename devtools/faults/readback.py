"""Reading back what happened: the workers' start log, and the tasks' final states through
the server's API (``GetTask``, ``ListDeadLetters``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from devtools.faults.records import (
    INDETERMINATE,
    CreateRecord,
    FinalState,
    Start,
    TaskKind,
    parse_start,
)
from devtools.faults.workload import CHANNEL_OPTIONS
from tikk.client.transport import Transport
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc

TERMINAL = frozenset({"SUCCEEDED", "DEAD_LETTERED", "CANCELLED", "NOT_FOUND"})


class StartLog:
    """The workers' start log, read incrementally: each ``read`` adds the complete lines
    appended since the last one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.starts: list[Start] = []
        self.malformed = 0
        self._offset = 0

    def read(self) -> list[Start]:
        """Every start so far."""
        if not self.path.exists():
            return self.starts
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            start = parse_start(line)
            if start is None:
                self.malformed += 1
            else:
                self.starts.append(start)
        return self.starts


def last_attempt(c: CreateRecord) -> int:
    """The attempt that ends a task of this kind."""
    return {TaskKind.ALWAYS_FAIL: c.max_attempts, TaskKind.FAIL_ONCE: 2}.get(c.kind, 1)


def still_expected(
    creates: Iterable[CreateRecord], cancelled: set[str], starts: Iterable[Start]
) -> list[str]:
    """Accepted, not cancelled tasks whose last attempt has not started yet."""
    seen = {s.run for s in starts}
    return [
        c.task_id
        for c in creates
        if c.accepted and c.task_id not in cancelled and (c.task_id, last_attempt(c)) not in seen
    ]


class StateReader:
    """Final states through the server's API, with retries (it may just have restarted)."""

    def __init__(
        self,
        address: str,
        namespace: str,
        deadline: float,
        threads: int = 8,
        transport: Transport | None = None,
    ) -> None:
        """``deadline`` (a ``time.monotonic`` instant): after it, states not read yet are
        reported ``UNREADABLE`` at once instead of being asked for. ``transport``: how to
        reach the server (plaintext if None)."""
        self.namespace = namespace
        self.deadline = deadline
        self._channel = (transport or Transport()).channel(address, CHANNEL_OPTIONS)
        self._tasks: Any = tasks_pb2_grpc.TaskServiceStub(self._channel)
        self._history: Any = history_pb2_grpc.HistoryServiceStub(self._channel)
        self._threads = threads

    def close(self) -> None:
        self._channel.close()

    def final(self, task_id: str, attempts: int = 5) -> FinalState:
        """``GetTask`` of one task; ``UNREADABLE`` if the server never answered."""
        request = tasks_pb2.GetTaskRequest(namespace=self.namespace, task_id=task_id)
        for n in range(attempts):
            if time.monotonic() > self.deadline:
                break
            try:
                task = self._tasks.GetTask(request, timeout=10)
            except grpc.RpcError as exc:
                if exc.code() is grpc.StatusCode.NOT_FOUND:
                    return FinalState(task_id, "NOT_FOUND", 0)
                if exc.code().name not in INDETERMINATE or n == attempts - 1:
                    return FinalState(task_id, "UNREADABLE", 0)
                time.sleep(1.0)
                continue
            state = tasks_pb2.TaskState.Name(task.state).removeprefix("TASK_STATE_")
            return FinalState(task_id, state, task.attempt, task.update_time.ToMilliseconds())
        return FinalState(task_id, "UNREADABLE", 0)

    def finals(self, task_ids: Iterable[str]) -> dict[str, FinalState]:
        """``GetTask`` of many tasks, a few at a time."""
        with ThreadPoolExecutor(self._threads, thread_name_prefix="readback") as pool:
            return {f.task_id: f for f in pool.map(self.final, task_ids)}

    def dead_letters(self) -> frozenset[str]:
        """Ids of every dead-lettered task of the namespace (``ListDeadLetters``, all pages)."""
        ids: set[str] = set()
        token = ""
        while True:
            request = history_pb2.ListDeadLettersRequest(
                namespace=self.namespace, page_size=1000, page_token=token
            )
            response = self._history.ListDeadLetters(request, timeout=60)
            ids.update(t.id for t in response.tasks)
            token = response.next_page_token
            if not token:
                return frozenset(ids)
