"""Server-side deadlines on a real server over a slow store: a call whose caller set no
deadline still ends (UNAVAILABLE, saying why) once the server's bound passes, each message
of a stream is bounded the same way, and a stream that sends nothing is closed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.embedded_api import embedded_api, embedded_settings
from tikk.errors import TikkError
from tikk.model import Task
from tikk.settings import Deadlines
from tikk.store.sqlite.tasks import SqliteTaskStore
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

BOUND = Deadlines(call_ms=400, stream_idle_ms=400)
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


class SlowStore(SqliteTaskStore):
    """The embedded store behind a slow disk: reads and creates of tasks take ``delay_s``."""

    delay_s = 30.0
    interrupted = 0

    async def get(self, namespace: str, task_id: str) -> Task:
        await self._stall()
        return await super().get(namespace, task_id)

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        await self._stall()
        return await super().create_many(tasks, new_ids=new_ids)

    async def _stall(self) -> None:
        try:
            await asyncio.sleep(self.delay_s)  # the slow disk itself
        except asyncio.CancelledError:
            self.interrupted += 1
            raise


@pytest.fixture
async def slow(tmp_path: Path) -> AsyncIterator[tuple[Any, SlowStore]]:
    settings = embedded_settings(tmp_path, deadlines=BOUND)
    store = SlowStore(str(tmp_path / "tikk.db"), settings.shard_count)
    await store.start()
    async with embedded_api(settings, store=store) as served:
        yield tasks_pb2_grpc.TaskServiceStub(served.channel), store
    await store.close()


async def test_a_unary_call_without_a_deadline_ends_at_the_server_bound(
    slow: tuple[Any, SlowStore],
) -> None:
    stub, store = slow
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.GetTask(tasks_pb2.GetTaskRequest(task_id="t"))  # no deadline of its own
    assert failure.value.code() is UNAVAILABLE
    assert "server's limit of 0.4 s" in (failure.value.details() or "")
    assert store.interrupted == 1  # the store wait was given up, not left running
    assert time.monotonic() - started < store.delay_s / 2  # far from the store's 30 s


async def test_each_import_batch_is_bounded_and_answered_unavailable(
    slow: tuple[Any, SlowStore],
) -> None:
    stub, store = slow
    item = tasks_pb2.CreateTaskRequest(task_id="a", queue="q", handler="h")
    batch = tasks_pb2.ImportTasksRequest(batch_id=7, tasks=[item])
    [answer] = [a async for a in stub.ImportTasks(iter([batch]))]
    assert (answer.batch_id, answer.code) == (7, UNAVAILABLE.value[0])
    assert "server's limit" in answer.message and "send it again" in answer.message
    assert store.interrupted == 1


async def test_a_stream_that_sends_nothing_is_closed(slow: tuple[Any, SlowStore]) -> None:
    stub, _ = slow
    never = asyncio.Event()

    async def silent() -> AsyncIterator[tasks_pb2.ImportTasksRequest]:
        await never.wait()
        yield tasks_pb2.ImportTasksRequest()

    with pytest.raises(grpc.aio.AioRpcError) as failure:
        async for _ in stub.ImportTasks(silent()):
            pass
    assert failure.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "sent no message for 0.4 s" in (failure.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.CreateTasks(silent())
    assert failure.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
