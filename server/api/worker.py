"""``tikk.v1.WorkerService``: a worker's configuration, and the streams of its run results:
each protobuf result becomes a ``RunReport`` for ``ResultRecorder.record`` (which checks its
delivery token first), and what that raises becomes the result's acknowledgement code."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from server.api import validation
from server.api.result_fields import check_result_text
from server.api.status import Ctx, bounded, code_of, detail_of, numeric, over_limit
from server.api.streams import answer_as_done
from server.ops.refusals import ResultRefused, StartTooLate
from server.ops.results import ResultRecorder
from server.ops.tasks import RunningAttempt, TaskOps
from tikk import delivery_codec
from tikk.clock import Clock
from tikk.delivery_tokens import TokenRefused
from tikk.errors import BackendUnavailable, InvalidArgument, ResourceExhausted, TikkError
from tikk.model import ResultKind, RunReport
from tikk.settings import Settings
from tikk.timestamps import to_duration, to_timestamp
from tikk.urls import redact
from tikk.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger("tikk.server")
# Results of one worker stream being recorded at once.
_RESULTS_IN_FLIGHT = 256
# Batches of one ReportResultBatches stream being recorded at once.
_BATCHES_IN_FLIGHT = 8
# What the recorder refuses on purpose (it logged and counted the token and attempt refusals).
_REFUSALS = (TokenRefused, ResultRefused, StartTooLate)


class WorkerService(worker_pb2_grpc.WorkerServiceServicer):  # type: ignore[misc]
    def __init__(
        self, results: ResultRecorder, tasks: TaskOps, settings: Settings, clock: Clock
    ) -> None:
        self._results = results
        self._tasks = tasks
        self._settings = settings
        self._clock = clock

    async def GetWorkerConfig(
        self, request: worker_pb2.GetWorkerConfigRequest, context: Ctx
    ) -> worker_pb2.GetWorkerConfigResponse:
        return worker_pb2.GetWorkerConfigResponse(
            # Never a password: a worker supplies its own (``tikk worker --queue-url``).
            queue_url=redact(self._settings.queue_url),
            visibility_timeout=to_duration(self._settings.visibility_timeout_ms),
            server_time=to_timestamp(self._clock.now_ms()),
        )

    async def CheckCancellations(
        self, request: worker_pb2.CheckCancellationsRequest, context: Ctx
    ) -> worker_pb2.CheckCancellationsResponse:
        most = self._settings.limits.max_page_size
        if len(request.runs) > most:
            raise InvalidArgument(
                "runs",
                f"at most {most:,} attempts per call (max_page_size), got {len(request.runs):,}",
            )
        runs = [_running(r) for r in request.runs]
        cancelled = await self._tasks.cancelled_attempts(runs)
        return worker_pb2.CheckCancellationsResponse(
            cancelled=[r for r, yes in zip(request.runs, cancelled, strict=True) if yes]
        )

    async def ReportResults(
        self, request_iterator: AsyncIterator[worker_pb2.RunResult], context: Ctx
    ) -> AsyncIterator[worker_pb2.ResultAck]:
        """Results are recorded concurrently (bounded) and acknowledged as each completes, so
        one slow write does not hold back the worker's other results."""
        acks: asyncio.Queue[worker_pb2.ResultAck | None] = asyncio.Queue()
        reader = asyncio.create_task(self._record_all(request_iterator, acks))
        try:
            while (ack := await acks.get()) is not None:
                yield ack
        finally:
            reader.cancel()

    async def _record_all(
        self,
        results: AsyncIterator[worker_pb2.RunResult],
        acks: asyncio.Queue[worker_pb2.ResultAck | None],
    ) -> None:
        limit = asyncio.Semaphore(_RESULTS_IN_FLIGHT)
        pending: set[asyncio.Task[None]] = set()
        try:
            async for result in results:
                await limit.acquire()
                task = asyncio.create_task(self._record_one(result, acks))
                pending.add(task)
                task.add_done_callback(pending.discard)
                task.add_done_callback(lambda _: limit.release())
            if pending:
                await asyncio.wait(pending)
        finally:
            acks.put_nowait(None)

    async def ReportResultBatches(
        self, request_iterator: AsyncIterator[worker_pb2.RunResultBatch], context: Ctx
    ) -> AsyncIterator[worker_pb2.ResultAckBatch]:
        """A batch's results are recorded together and acknowledged in one message; up to
        ``_BATCHES_IN_FLIGHT`` batches of a stream are recorded at once, each answered as soon
        as it is done, so one slow batch holds back no other's acknowledgements."""

        async def one(batch: worker_pb2.RunResultBatch) -> worker_pb2.ResultAckBatch:
            return await self._settle_batch(batch)

        # Headers at once: a worker waits for them before writing, to tell this server from
        # one without the method (see worker_sdk.results).
        await context.send_initial_metadata(())
        async for answer in answer_as_done(request_iterator, one, _BATCHES_IN_FLIGHT):
            yield answer

    async def _settle_batch(self, batch: worker_pb2.RunResultBatch) -> worker_pb2.ResultAckBatch:
        """A batch's acknowledgements. A batch over the size limit is refused whole; a result
        not recorded within the server's bound on one message is refused on its own (it may
        be sent again), and the others of its batch are acknowledged as they settled."""
        most, limit_ms = self._settings.limits.max_result_batch, self._settings.deadlines.call_ms
        if len(batch.results) > most:
            too_big = ResourceExhausted(
                f"a result batch holds at most {most:,} results (max_result_batch), this "
                f"one {len(batch.results):,}: split it"
            )
            return worker_pb2.ResultAckBatch(acks=[_ack(r.run_id, too_big) for r in batch.results])
        if not batch.results:
            return worker_pb2.ResultAckBatch()
        settling = [asyncio.ensure_future(self._settle(r)) for r in batch.results]
        try:
            _, late = await asyncio.wait(settling, timeout=limit_ms / 1000)
        finally:  # past the bound, or the stream ended: no result is left recording unseen
            for task in settling:
                task.cancel()
        slow = BackendUnavailable(over_limit("recording a result", limit_ms / 1000))
        acks = [
            _ack(r.run_id, slow) if task in late else task.result()
            for r, task in zip(batch.results, settling, strict=True)
        ]
        return worker_pb2.ResultAckBatch(acks=acks)

    async def _record_one(
        self, result: worker_pb2.RunResult, acks: asyncio.Queue[worker_pb2.ResultAck | None]
    ) -> None:
        try:
            limit_ms = self._settings.deadlines.call_ms
            ack = await bounded(self._settle(result), limit_ms, "recording a result")
        except TikkError as exc:
            ack = _ack(result.run_id, exc)
        acks.put_nowait(ack)

    async def _settle(self, result: worker_pb2.RunResult) -> worker_pb2.ResultAck:
        """Record one result; its acknowledgement, with the reason if it was refused."""
        try:
            await self._results.record(self._report(result))
        except _REFUSALS as exc:  # logged and counted where it was refused
            return _ack(result.run_id, exc)
        except TikkError as exc:
            log.warning("result %s not recorded: %s", result.run_id, exc)
            return _ack(result.run_id, exc)
        return worker_pb2.ResultAck(run_id=result.run_id)

    def _report(self, r: worker_pb2.RunResult) -> RunReport:
        check_result_text(r, self._settings.limits)
        try:
            kind = ResultKind(r.kind)
        except ValueError:
            raise InvalidArgument("kind", f"unknown result kind {r.kind}") from None
        return RunReport(
            run_id=r.run_id,
            delivery=delivery_codec.from_proto(r.delivery, self._settings.shard_count),
            kind=kind,
            started_ms=validation.timestamp_ms(r.start_time, "start_time"),
            finished_ms=validation.timestamp_ms(r.finish_time, "finish_time"),
            worker_id=r.worker_id,
            error_type=r.error_type,
            error_message=r.error_message,
            output=r.output,
            traceback=r.traceback,
            retry_after_ms=r.retry_after.ToMilliseconds() if r.HasField("retry_after") else None,
        )


def _running(r: worker_pb2.RunningAttempt) -> RunningAttempt:
    due_ms = validation.timestamp_ms(r.due_time, "runs.due_time")
    return RunningAttempt(r.namespace, r.task_id, r.queue, r.attempt, due_ms)


def _ack(run_id: str, exc: TikkError) -> worker_pb2.ResultAck:
    return worker_pb2.ResultAck(run_id=run_id, code=numeric(code_of(exc)), message=detail_of(exc))
