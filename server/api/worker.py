"""``tikk.v1.WorkerService``: a worker's configuration, and the stream of its run results
(protobuf results become ``RunReport`` for the lifecycle).

Every result's delivery token is checked before anything is read or written for it
(``tikk.delivery_tokens``): a worker can report only deliveries a dispatcher published, for
the task, attempt and queue they name. A refusal (bad token, or an attempt that is not the
current one, see ``server.results``) is logged without token or payload and counted
(``tikk.results.refused`` by reason)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc

from server.api import validation
from server.api.status import Ctx, bounded, code_of, maps_errors, numeric
from server.batching import Coalescer, answer_in_order
from server.results import Lifecycle, ResultRefused
from tikk import delivery_codec
from tikk.delivery_tokens import DeliveryKeys, TokenRefused
from tikk.errors import InvalidArgument, ResourceExhausted, TikkError
from tikk.model import ResultKind, RunReport
from tikk.settings import Settings
from tikk.telemetry import Telemetry
from tikk.timestamps import to_duration
from tikk.urls import redact
from tikk.v1 import worker_pb2, worker_pb2_grpc

log = logging.getLogger("tikk.server")
# Results of one worker stream being recorded at once.
_RESULTS_IN_FLIGHT = 256
# Batches of one ReportResultBatches stream being recorded at once.
_BATCHES_IN_FLIGHT = 8


@dataclass
class _PendingSuccess:
    """A success waiting in the coalescer, and its refusal once its batch was written."""

    report: RunReport
    refused: ResultRefused | None = None


class WorkerService(worker_pb2_grpc.WorkerServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        lifecycle: Lifecycle,
        settings: Settings,
        keys: DeliveryKeys,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._lc = lifecycle
        self._settings = settings
        self._keys = keys
        self._telemetry = telemetry or Telemetry()
        # Successes of every stream are written together (see server.batching).
        self._successes = Coalescer(self._write_successes)

    @maps_errors
    async def GetWorkerConfig(
        self, request: worker_pb2.GetWorkerConfigRequest, context: Ctx
    ) -> worker_pb2.GetWorkerConfigResponse:
        return worker_pb2.GetWorkerConfigResponse(
            # Never a password: a worker supplies its own (``tikk worker --queue-url``).
            queue_url=redact(self._settings.queue_url),
            visibility_timeout=to_duration(self._settings.visibility_timeout_ms),
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
        ``_BATCHES_IN_FLIGHT`` batches of a stream are recorded at once."""

        async def one(batch: worker_pb2.RunResultBatch) -> worker_pb2.ResultAckBatch:
            return await self._settle_batch(batch)

        # Headers at once: a worker waits for them before writing, to tell this server from
        # one without the method (see worker_sdk.results).
        await context.send_initial_metadata(())
        async for answer in answer_in_order(request_iterator, one, _BATCHES_IN_FLIGHT):
            yield answer

    async def _settle_batch(self, batch: worker_pb2.RunResultBatch) -> worker_pb2.ResultAckBatch:
        """A batch's acknowledgements; a batch over the size limit, or not recorded within the
        server's bound on one message, is refused whole (each result may be sent again)."""
        most, limit_ms = self._settings.limits.max_result_batch, self._settings.deadlines.call_ms
        try:
            if len(batch.results) > most:
                raise ResourceExhausted(
                    f"a result batch holds at most {most:,} results (max_result_batch), this "
                    f"one {len(batch.results):,}: split it"
                )
            work = asyncio.gather(*(self._settle(r) for r in batch.results))
            acks = await bounded(work, limit_ms, "recording a result batch")
        except TikkError as exc:
            code = numeric(code_of(exc))
            acks = [
                worker_pb2.ResultAck(run_id=r.run_id, code=code, message=str(exc))
                for r in batch.results
            ]
        return worker_pb2.ResultAckBatch(acks=acks)

    async def _record_one(
        self, result: worker_pb2.RunResult, acks: asyncio.Queue[worker_pb2.ResultAck | None]
    ) -> None:
        try:
            limit_ms = self._settings.deadlines.call_ms
            ack = await bounded(self._settle(result), limit_ms, "recording a result")
        except TikkError as exc:
            ack = worker_pb2.ResultAck(
                run_id=result.run_id, code=numeric(code_of(exc)), message=str(exc)
            )
        acks.put_nowait(ack)

    async def _settle(self, result: worker_pb2.RunResult) -> worker_pb2.ResultAck:
        """Record one result; its acknowledgement, with the reason if it was refused."""
        try:
            report = self._report(result)
            if report.kind is ResultKind.STARTED:
                return await self._start(report)
            if report.kind is ResultKind.SUCCEEDED:
                await self._record_success(report)
            else:
                await self._lc.record_result(report)
            return worker_pb2.ResultAck(run_id=result.run_id)
        except (TokenRefused, ResultRefused) as exc:
            return self._refused(result, exc)
        except TikkError as exc:
            log.warning("result %s not recorded: %s", result.run_id, exc)
            return worker_pb2.ResultAck(
                run_id=result.run_id, code=numeric(code_of(exc)), message=str(exc)
            )

    def _refused(
        self, result: worker_pb2.RunResult, exc: TokenRefused | ResultRefused
    ) -> worker_pb2.ResultAck:
        """Record a refusal: a log line (its message names no token or payload) and a count."""
        d = result.delivery
        log.warning(
            "result %s refused (%s): namespace %r task %r queue %r attempt %d: %s",
            result.run_id, exc.reason, d.namespace, d.task_id, d.queue, d.attempt, exc,
        )  # fmt: skip
        self._telemetry.result_refused(exc.reason)
        return worker_pb2.ResultAck(
            run_id=result.run_id, code=numeric(code_of(exc)), message=str(exc)
        )

    async def _record_success(self, report: RunReport) -> None:
        pending = _PendingSuccess(report)
        await self._successes.submit(pending)
        if pending.refused is not None:
            raise pending.refused

    async def _write_successes(self, batch: Sequence[_PendingSuccess]) -> None:
        refusals = await self._lc.record_successes([p.report for p in batch])
        for pending, refused in zip(batch, refusals, strict=True):
            pending.refused = refused

    async def _start(self, report: RunReport) -> worker_pb2.ResultAck:
        """A worker's request to start an attempt that has a start timeout."""
        if await self._lc.claim_start(report):
            return worker_pb2.ResultAck(run_id=report.run_id)
        return worker_pb2.ResultAck(
            run_id=report.run_id,
            code=numeric(grpc.StatusCode.FAILED_PRECONDITION),
            message="the attempt's start timeout ran out: it was dead-lettered; do not run it",
        )

    def _report(self, r: worker_pb2.RunResult) -> RunReport:
        if not r.run_id:
            raise InvalidArgument("run_id", "must not be empty")
        try:
            kind = ResultKind(r.kind)
        except ValueError:
            raise InvalidArgument("kind", f"unknown result kind {r.kind}") from None
        delivery = delivery_codec.from_proto(r.delivery, self._settings.shard_count)
        self._keys.verify(delivery)
        return RunReport(
            run_id=r.run_id,
            entry=delivery.entry,
            fired_ms=delivery.fired_ms,
            kind=kind,
            started_ms=validation.timestamp_ms(r.start_time, "start_time"),
            finished_ms=validation.timestamp_ms(r.finish_time, "finish_time"),
            worker_id=r.worker_id,
            error_type=r.error_type,
            error_message=r.error_message,
            output=r.output,
            retry_after_ms=r.retry_after.ToMilliseconds() if r.HasField("retry_after") else None,
        )
