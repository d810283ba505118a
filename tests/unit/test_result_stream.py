"""The result stream against a real gRPC server that misbehaves: calls finished or aborted
half-way, writes after a call ended, a server stopped and started again on the same port.
Every result reported must be acknowledged in the end, none lost."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest

from tests.waiting import eventually_async
from tests.worker_server import WorkerServer
from tikk.v1 import worker_pb2, worker_pb2_grpc
from worker_sdk import results as results_module
from worker_sdk.results import Backoff, ResultStream


def result() -> worker_pb2.RunResult:
    return worker_pb2.RunResult(run_id=uuid.uuid4().hex, kind=worker_pb2.RESULT_KIND_SUCCEEDED)


@pytest.fixture(params=[True, False], ids=["batches", "one-by-one"])
async def server(request: pytest.FixtureRequest) -> AsyncIterator[WorkerServer]:
    s = WorkerServer(batches=request.param)
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def channel(server: WorkerServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture
async def stream(channel: grpc.aio.Channel) -> AsyncIterator[ResultStream]:
    s = ResultStream(worker_pb2_grpc.WorkerServiceStub(channel), backoff=Backoff(0.02, 0.2))
    s.start()
    yield s
    await s.close()


async def report_all(stream: ResultStream, results: list[worker_pb2.RunResult]) -> set[str]:
    """Report concurrently; the run ids acknowledged OK (fails if any takes over 20 s)."""
    async with asyncio.timeout(20):
        acks = await asyncio.gather(*(stream.report(r) for r in results))
    return {ack.run_id for ack in acks if ack.code == 0}


async def test_a_burst_goes_out_on_one_call_each_result_once(
    server: WorkerServer, stream: ResultStream
) -> None:
    """Results reported while earlier ones are being written wait and go out together; none
    is lost, written twice or left waiting."""
    results = [result() for _ in range(2000)]
    assert await report_all(stream, results) == {r.run_id for r in results}
    assert server.calls == 1
    if server.batches:  # in few messages, not one per result
        assert 8 <= server.batch_messages < 200
    assert len(server.received) == 2000 and set(server.received.values()) == {1}
    assert stream.waiting_s() == 0.0
    more = [result() for _ in range(10)]  # a quiet stream wakes for the next one
    assert await report_all(stream, more) == {r.run_id for r in more}


async def test_results_reported_one_at_a_time_share_batch_messages(
    server: WorkerServer, stream: ResultStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs started at their due millisecond report one by one; a result waits a few
    milliseconds for others rather than taking a message of its own. (The wait is made
    longer here, so that a busy machine's slow timers cannot spread the results past it.)"""
    monkeypatch.setattr(results_module, "LINGER_S", 0.05)
    results = [result() for _ in range(60)]
    reports = []
    async with asyncio.timeout(20):
        for r in results:  # one result a millisecond: each write is done before the next
            reports.append(asyncio.create_task(stream.report(r)))
            await asyncio.sleep(0.001)
        acks = await asyncio.gather(*reports)
    assert {a.run_id for a in acks if a.code == 0} == {r.run_id for r in results}
    if server.batches:
        assert server.batch_messages <= 30  # one message per result without the wait


async def test_calls_finished_or_aborted_half_way_lose_no_result(
    server: WorkerServer, stream: ResultStream
) -> None:
    server.script = [("finish", 3), ("abort", 2), ("finish", 1), ("abort", 5)] * 3
    results = [result() for _ in range(40)]
    run_ids = {r.run_id for r in results}
    assert await report_all(stream, results) == run_ids
    assert server.acked == run_ids
    assert server.calls > 12  # every scripted call ended and a new one was opened
    print(f"{server.calls} calls, {sum(server.received.values())} sends for 40 results")


# Only one result per message can be written between the end of a call and its report.
@pytest.mark.parametrize("server", [False], indirect=True, ids=["one-by-one"])
async def test_a_call_the_server_ends_between_writes_ends_only_that_call(
    server: WorkerServer, channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    """The server ends call after call once it read one result, while the stream is still
    re-sending the others, so the end of a call often arrives between two writes. That must
    end only the call (the stream sees the call's status), never by a write refused with
    "RPC already finished", and every result is acknowledged once the server takes them."""
    stub = worker_pb2_grpc.WorkerServiceStub(channel)
    stream = ResultStream(stub, backoff=Backoff(0.005, 0.01))
    server.script = [("finish", 1)] * 200
    results = [result() for _ in range(30)]
    with caplog.at_level(logging.DEBUG, logger="tikk.worker"):
        stream.start()
        try:
            reports = asyncio.gather(*(stream.report(r) for r in results))
            await eventually_async(lambda: not server.script, 30)  # every scripted call ended
            async with asyncio.timeout(10):
                acks = await reports
        finally:
            await stream.close()
    assert {a.run_id for a in acks} == server.acked == {r.run_id for r in results}
    assert "RPC already finished" not in caplog.text


async def test_a_server_stopped_and_started_on_the_same_port_gets_every_result(
    server: WorkerServer, stream: ResultStream
) -> None:
    first = [result() for _ in range(10)]
    assert await report_all(stream, first) == {r.run_id for r in first}
    await server.stop()
    later = [result() for _ in range(10)]
    reports = asyncio.gather(*(stream.report(r) for r in later))
    await asyncio.sleep(1.0)  # several reconnects fail meanwhile
    assert not reports.done()
    assert stream.waiting_s() >= 0.9
    await server.start()
    async with asyncio.timeout(10):
        acks = await reports
    assert {a.run_id for a in acks} == {r.run_id for r in later}
    assert server.acked == {r.run_id for r in first + later}
    assert stream.waiting_s() == 0.0


async def test_waiting_counts_from_the_later_of_the_oldest_wait_and_the_last_ack(
    server: WorkerServer, channel: grpc.aio.Channel
) -> None:
    """An idle spell before a result is not waiting; a server that acknowledges nothing lets
    the wait grow from its last acknowledgement or the oldest wait, whichever is later."""
    now = [100.0]
    stream = ResultStream(worker_pb2_grpc.WorkerServiceStub(channel), clock=lambda: now[0])
    stream.start()
    try:
        assert stream.waiting_s() == 0.0  # nothing waits
        await report_all(stream, [result()])  # acknowledged at 100
        await server.stop()
        now[0] = 105.0
        first = asyncio.ensure_future(stream.report(result()))
        await asyncio.sleep(0.1)  # time passes with no server: the result stays unanswered
        assert not first.done()
        now[0] = 110.0
        assert stream.waiting_s() == 5.0  # since the oldest wait (105), not the ack (100)
        now[0] = 125.0
        second = asyncio.ensure_future(stream.report(result()))
        assert stream.waiting_s() == 20.0  # a newer result does not hide the older one
        await server.start()
        async with asyncio.timeout(10):
            await asyncio.gather(first, second)
        assert stream.waiting_s() == 0.0
    finally:
        await stream.close()
