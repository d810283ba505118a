"""``ReportResultBatches`` on a real server: what a worker does, by hand, with a batch that
mixes a good result, a malformed one and a repeat of the good one."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import grpc
import pytest

from tests.e2e.conftest import Stack
from tikk.timestamps import to_timestamp
from tikk.v1 import tasks_pb2, worker_pb2, worker_pb2_grpc
from worker_sdk.queues.consumer import Message
from worker_sdk.queues.local import LocalQueueConsumer


@pytest.fixture(scope="module")
def server_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("batches"))
    s.start_server()
    yield s
    s.close()


async def _lease(queue_url: str, queue: str, n: int) -> list[worker_pb2.Delivery]:
    consumer = LocalQueueConsumer(queue_url.removeprefix("local://"), [queue], 60_000)
    await consumer.start()
    try:
        messages: list[Message] = []
        deadline = time.monotonic() + 20
        while len(messages) < n and time.monotonic() < deadline:
            messages += await consumer.fetch(n - len(messages))
        return [m.delivery for m in messages]
    finally:
        await consumer.close()


def _result(delivery: worker_pb2.Delivery, run_id: str) -> worker_pb2.RunResult:
    now = int(time.time() * 1000)
    return worker_pb2.RunResult(
        run_id=run_id, delivery=delivery, kind=worker_pb2.RESULT_KIND_SUCCEEDED,
        start_time=to_timestamp(now - 5), finish_time=to_timestamp(now), worker_id="by-hand",
    )  # fmt: skip


async def test_a_batch_is_acknowledged_item_by_item_and_recorded_once(
    server_only: Stack, ns: str
) -> None:
    queue = "batches"
    ids = [f"b-{i}" for i in range(3)]
    for tid in ids:
        req = tasks_pb2.CreateTaskRequest(namespace=ns, task_id=tid, queue=queue, handler="h")
        server_only.tasks.CreateTask(req, timeout=10)
    async with grpc.aio.insecure_channel(server_only.address) as channel:
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        config = await stub.GetWorkerConfig(worker_pb2.GetWorkerConfigRequest(), timeout=10)
        deliveries = await _lease(config.queue_url, queue, len(ids))
        assert sorted(d.task_id for d in deliveries) == ids
        runs = [_result(d, uuid.uuid4().hex) for d in deliveries]
        bad = worker_pb2.RunResult(run_id="", delivery=deliveries[0])
        call = stub.ReportResultBatches()
        await call.write(worker_pb2.RunResultBatch(results=[*runs, bad]))
        first = await call.read()
        await call.write(worker_pb2.RunResultBatch(results=runs[:1]))  # a lost ack, resent
        second = await call.read()
        await call.done_writing()
    assert [(a.run_id, a.code) for a in first.acks] == [
        *((r.run_id, 0) for r in runs),
        ("", grpc.StatusCode.INVALID_ARGUMENT.value[0]),
    ]
    assert "run_id" in first.acks[-1].message
    assert [(a.run_id, a.code) for a in second.acks] == [(runs[0].run_id, 0)]
    for tid in ids:
        assert server_only.task(ns, tid).state == tasks_pb2.TASK_STATE_SUCCEEDED
        assert len(server_only.runs(ns, tid)) == 1
