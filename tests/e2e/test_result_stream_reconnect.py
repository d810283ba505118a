"""A worker's result stream across a ``kill -9`` of its server and a restart on the same port
and data directory: the worker says once that the stream was lost, reopens it soon after the
server answers again (no error from using a call that had already ended), and every run is
recorded, none lost and none twice."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.e2e.conftest import Process
from tests.waiting import eventually_async
from tests.worker_server import free_port
from tikk.client.transport import Transport
from tikk.timestamps import to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc
from worker_sdk import TaskContext, Worker

pytestmark = pytest.mark.e2e
NS = "result-stream"
QUEUE = "rstream"
HELD = 20  # runs that finish while the server is down: their results wait for it
FLOW = 150  # runs while the server is up, before the crash
# From the server answering again to the first result it acknowledges: the channel's own
# reconnect (the worker caps its backoff at a second), at worst the stream's backoff (capped
# at a second too) and slack for a loaded machine. A stream that backs off for seconds
# misses it.
RECONNECT_BOUND_S = 3.0


class Runs:
    """The handler: each run's id by task. A run of a ``hold`` task finishes only once
    ``release`` is set (after the crash), so its result has to wait for the server."""

    def __init__(self) -> None:
        self.by_task: dict[str, list[str]] = defaultdict(list)
        self.release = asyncio.Event()

    async def handle(self, ctx: TaskContext, payload: bytes) -> bytes:
        self.by_task[ctx.task_id].append(ctx.run_id)
        if payload == b"hold":
            await self.release.wait()
        return b"ok:" + ctx.task_id.encode()


class Embedded:
    """``tikk dev`` on one data directory and one port across restarts."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.address = f"127.0.0.1:{free_port()}"
        self.process: Process | None = None

    def start(self) -> float:
        """Start it and wait until it serves (blocking); the monotonic time it does."""
        self.process = Process(
            [
                *("dev", "--data-dir", str(self.data_dir), "--listen", self.address),
                *("--shards", "16", "--visibility-timeout", "4s"),
            ],
            {"PYTHONUNBUFFERED": "1"},
        )
        self.process.wait_for(re.compile("listening on"))
        return time.monotonic()

    def kill9(self) -> None:
        assert self.process is not None
        self.process.kill9()


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Embedded]:
    server = Embedded(tmp_path)
    server.start()
    yield server
    if server.process is not None:
        server.process.stop()


async def create(address: str, tasks: dict[str, bytes]) -> None:
    """Tasks of ``QUEUE`` due in a moment, with the given payloads."""
    due = to_timestamp(time.time_ns() // 1_000_000 + 300)
    chunk = tasks_pb2.CreateTasksRequest(
        tasks=[
            tasks_pb2.CreateTaskRequest(
                namespace=NS, task_id=tid, queue=QUEUE, handler="h", payload=p, run_at=due
            )
            for tid, p in tasks.items()
        ]
    )
    async with grpc.aio.insecure_channel(address) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)
        assert (await stub.CreateTasks(iter([chunk]), timeout=30)).accepted == len(tasks)


async def recorded(address: str, task_ids: list[str]) -> dict[str, list[history_pb2.Run]]:
    """Each task's runs in the server's history."""
    runs: dict[str, list[history_pb2.Run]] = {}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = history_pb2_grpc.HistoryServiceStub(channel)
        for tid in task_ids:
            request = history_pb2.ListTaskRunsRequest(namespace=NS, task_id=tid)
            runs[tid] = list((await stub.ListTaskRuns(request, timeout=10)).runs)
    return runs


async def crash_and_restart(embedded: Embedded, worker: Worker, runs: Runs) -> float:
    """Kill the server while results stream and held runs wait, let them finish into the
    outage, start it again; how long the first acknowledgement took once it served."""
    await eventually_async(lambda: worker.completed >= FLOW // 2, 60, what="results flowing")
    await eventually_async(lambda: len(runs.by_task) >= FLOW + HELD, 60, what="all runs started")
    embedded.kill9()
    acknowledged = worker.completed
    runs.release.set()  # the held runs finish now: their results find no server
    await asyncio.sleep(0.5)  # the outage itself: the worker's stream waits it out
    serving_at = await asyncio.to_thread(embedded.start)
    await eventually_async(lambda: worker.completed > acknowledged, 60, what="an ack after restart")
    return time.monotonic() - serving_at


def all_acknowledged(worker: Worker, runs: Runs, tasks: int) -> bool:
    """Every task ran and every run's result was acknowledged."""
    return len(runs.by_task) == tasks and worker.completed >= sum(map(len, runs.by_task.values()))


# With a token, the worker's calls go through grpc.aio's client interceptors, whose calls
# report their end to a write differently from plain ones.
@pytest.mark.parametrize("token", ["", "a-token"], ids=["plain", "token"])
async def test_the_stream_rides_out_a_kill9_of_the_server(
    embedded: Embedded, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = {f"flow-{i}": b"" for i in range(FLOW)} | {f"held-{i}": b"hold" for i in range(HELD)}
    runs = Runs()
    worker = Worker([QUEUE], concurrency=HELD + 16, transport=Transport(token=token))
    worker.register("h", runs.handle)
    stop = asyncio.Event()
    caplog.set_level(logging.INFO, logger="tikk.worker")
    working = asyncio.create_task(worker.run(embedded.address, stop=stop))
    try:
        await create(embedded.address, tasks)
        reconnect_s = await crash_and_restart(embedded, worker, runs)
        await eventually_async(lambda: all_acknowledged(worker, runs, len(tasks)), 60, what="acks")
    finally:
        stop.set()
        await asyncio.wait_for(working, 60)
    history = await recorded(embedded.address, sorted(tasks))
    for tid in tasks:  # every run the handler made is recorded, once
        assert runs.by_task[tid], tid
        assert sorted(r.run_id for r in history[tid]) == sorted(runs.by_task[tid]), tid
        assert {r.output for r in history[tid]} == {b"ok:" + tid.encode()}, tid
    lost = [r.getMessage() for r in caplog.records if "result stream lost" in r.getMessage()]
    print(f"reconnected {reconnect_s:.2f} s after the server served; logged: {lost}")
    assert "RPC already finished" not in caplog.text
    assert len(lost) == 1, lost  # one line for one outage
    assert reconnect_s < RECONNECT_BOUND_S
