"""How ``ReportResultBatches`` answers: each batch as soon as it is done (not behind a slower
one sent before it), and a result that outruns the server's bound refused on its own while
the rest of its batch is acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, cast

import grpc

from server.api.worker import WorkerService
from tikk.clock import SystemClock
from tikk.model import RunReport
from tikk.settings import Settings
from tikk.v1 import worker_pb2

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]


class _Recorder:
    """Records at once, except runs named in ``hang``, which wait until ``release``."""

    def __init__(self, hang: set[str]) -> None:
        self.hang = hang
        self.release = asyncio.Event()

    async def record(self, report: RunReport) -> None:
        if report.run_id in self.hang:
            await self.release.wait()


class _Service(WorkerService):
    def _report(self, r: worker_pb2.RunResult) -> RunReport:
        return cast(RunReport, r)  # the recorder above reads only run_id


def _service(recorder: _Recorder, call_ms: int) -> WorkerService:
    settings = Settings("memory://", "memory://", "memory://")
    settings = replace(settings, deadlines=replace(settings.deadlines, call_ms=call_ms))
    return _Service(cast(Any, recorder), cast(Any, None), settings, SystemClock())


def _batch(*run_ids: str) -> worker_pb2.RunResultBatch:
    return worker_pb2.RunResultBatch(results=[worker_pb2.RunResult(run_id=r) for r in run_ids])


async def _requests(*batches: worker_pb2.RunResultBatch) -> AsyncIterator[Any]:
    for batch in batches:
        yield batch


class _Ctx:
    async def send_initial_metadata(self, metadata: Any) -> None:
        pass


CTX = cast(Any, _Ctx())


async def test_a_later_batch_is_answered_before_a_slow_earlier_one() -> None:
    recorder = _Recorder(hang={"slow"})
    service = _service(recorder, call_ms=60_000)
    answers = service.ReportResultBatches(_requests(_batch("slow", "a"), _batch("b")), CTX)
    async with asyncio.timeout(10):
        first = await anext(answers)
        assert [a.run_id for a in first.acks] == ["b"]
        recorder.release.set()
        second = await anext(answers)
    assert [(a.run_id, a.code) for a in second.acks] == [("slow", 0), ("a", 0)]


async def test_only_the_result_over_the_bound_is_refused() -> None:
    recorder = _Recorder(hang={"slow"})
    service = _service(recorder, call_ms=200)
    answers = service.ReportResultBatches(_requests(_batch("a", "slow", "b")), CTX)
    async with asyncio.timeout(10):
        [answer] = [a async for a in answers]
    assert [(a.run_id, a.code) for a in answer.acks] == [
        ("a", 0),
        ("slow", UNAVAILABLE),
        ("b", 0),
    ]
    assert "took longer than the server's limit of 0.2 s" in answer.acks[1].message


def _settling() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if "_settle" in repr(t.get_coro())]


async def test_a_stream_that_ends_leaves_no_result_recording() -> None:
    recorder = _Recorder(hang={"slow"})
    service = _service(recorder, call_ms=60_000)
    answers = service.ReportResultBatches(_requests(_batch("slow")), CTX)
    reading = asyncio.ensure_future(anext(answers))
    await asyncio.sleep(0.1)
    assert len(_settling()) == 1  # waiting for the store
    reading.cancel()  # the worker went away
    await asyncio.sleep(0.1)
    assert _settling() == []
