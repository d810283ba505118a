"""Bulk loads over a real gRPC server on the embedded backends: ImportTasks answers each batch
once it is durable and holds a fast client back; CreateTasks stops at its per-stream cap and
still reports everything it wrote."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from server.api.streams import answer_in_order
from server.wiring import Backends
from tests.embedded_api import embedded_api, embedded_settings
from tikk.settings import Limits
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

OK = grpc.StatusCode.OK.value[0]
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
LIMITS = Limits(max_create_tasks_per_stream=25, max_import_batch=10, import_window=2)


@dataclass
class Server:
    tasks: tasks_pb2_grpc.TaskServiceStub
    backends: Backends


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with embedded_api(embedded_settings(tmp_path, limits=LIMITS)) as served:
        yield Server(tasks_pb2_grpc.TaskServiceStub(served.channel), served.backends)


def item(task_id: str, **fields: object) -> tasks_pb2.CreateTaskRequest:
    base = {"namespace": "imp", "task_id": task_id, "queue": "q", "handler": "h"}
    return tasks_pb2.CreateTaskRequest(**{**base, **fields})  # type: ignore[arg-type]


def batches(count: int, size: int, prefix: str = "t") -> Iterator[tasks_pb2.ImportTasksRequest]:
    for b in range(count):
        ids = [f"{prefix}{b}-{i}" for i in range(size)]
        yield tasks_pb2.ImportTasksRequest(batch_id=b, tasks=[item(i) for i in ids])


async def listed(server: Server) -> set[str]:
    req = tasks_pb2.ListTasksRequest(namespace="imp", queue="q", page_size=1000)
    return {t.id for t in (await server.tasks.ListTasks(req)).tasks}


async def test_every_batch_is_answered_in_order_with_a_result_per_task(server: Server) -> None:
    answers = [a async for a in server.tasks.ImportTasks(batches(7, 10))]
    assert [a.batch_id for a in answers] == list(range(7))
    assert all((a.code, a.accepted, a.rejected) == (OK, 10, 0) for a in answers)
    assert [r.index for r in answers[3].results] == list(range(10))
    assert {r.task_id for a in answers for r in a.results} == await listed(server)
    assert len(await listed(server)) == 70


async def test_bad_items_and_an_oversized_batch_are_refused_and_the_rest_goes_in(
    server: Server,
) -> None:
    mixed = tasks_pb2.ImportTasksRequest(
        batch_id=1, tasks=[item("a"), item("b", queue=""), item("c")]
    )
    big = tasks_pb2.ImportTasksRequest(batch_id=2, tasks=[item(f"x{i}") for i in range(11)])
    after = tasks_pb2.ImportTasksRequest(batch_id=3, tasks=[item("d")])
    answers = [a async for a in server.tasks.ImportTasks(iter([mixed, big, after]))]
    assert [(r.index, r.code == OK) for r in answers[0].results] == [
        (0, True),
        (1, False),
        (2, True),
    ]
    assert (answers[1].code, list(answers[1].results)) == (EXHAUSTED, [])
    assert "at most 10 tasks" in answers[1].message and "11" in answers[1].message
    assert answers[2].accepted == 1
    assert await listed(server) == {"a", "c", "d"}


async def test_a_batch_sent_again_after_a_broken_stream_creates_nothing_twice(
    server: Server,
) -> None:
    first = [a async for a in server.tasks.ImportTasks(batches(3, 10))]
    again = [a async for a in server.tasks.ImportTasks(batches(3, 10))]
    assert sum(r.created for a in first for r in a.results) == 30
    assert sum(r.created for a in again for r in a.results) == 0
    assert all(r.code == OK for a in again for r in a.results)
    assert len(await listed(server)) == 30


async def test_no_request_is_read_while_the_window_is_unanswered() -> None:
    pulled: list[int] = []
    stored: list[int] = []
    window_full, release = asyncio.Event(), asyncio.Event()

    async def requests() -> AsyncIterator[int]:
        for n in range(100):
            pulled.append(n)
            yield n

    async def slow_store(n: int) -> int:
        stored.append(n)
        if len(stored) == 3:
            window_full.set()
        await release.wait()
        return n

    answers = answer_in_order(requests(), slow_store, window=3)
    first = asyncio.ensure_future(anext(answers))
    async with asyncio.timeout(10):
        await window_full.wait()
    assert pulled == [0, 1, 2]  # the store holds all three: the fourth is not read
    await asyncio.sleep(0.1)  # time for a wrong reader to read on regardless
    assert pulled == [0, 1, 2]
    release.set()
    assert await first == 0
    assert [n async for n in answers] == list(range(1, 100))
    assert len(pulled) == 100


async def test_create_tasks_stops_at_its_cap_and_reports_what_it_wrote(server: Server) -> None:
    chunks = [tasks_pb2.CreateTasksRequest(tasks=[item(f"c{c}-{i}") for i in range(10)])
              for c in range(4)]  # fmt: skip
    resp = await server.tasks.CreateTasks(iter(chunks))
    assert (resp.accepted, resp.rejected) == (25, 1)
    refused = resp.results[-1]
    assert (refused.index, refused.code) == (25, EXHAUSTED)
    assert "at most 25 items" in refused.message and "ImportTasks" in refused.message
    assert [r.index for r in resp.results[:-1]] == list(range(25))
    assert len(await listed(server)) == 25
