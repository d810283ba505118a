"""gRPC servicers of tikk.v1: thin adapters from protobuf to ``Lifecycle`` and the stores."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from dispatcher.ready_queue import QueueBacklog
from history.run_history import OccurrenceQuery, RunQuery
from server import convert, validation
from server.results import Lifecycle
from server.status import code_of, maps_errors, numeric
from tikk import delivery_codec
from tikk.errors import InvalidArgument, TikkError
from tikk.model import ResultKind, RunReport, RunStatus, Task
from tikk.paging import decode_token, encode_token, page_size
from tikk.settings import Settings
from tikk.telemetry import Telemetry
from tikk.timestamps import to_duration
from tikk.v1 import (
    history_pb2,
    history_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

log = logging.getLogger("tikk.server")
Ctx = grpc.aio.ServicerContext[Any, Any]
_HOUR_MS = 3_600_000
_OCCURRENCE_RANGE_MS = 30 * 86_400_000
# Results of one worker stream being recorded at once.
_RESULTS_IN_FLIGHT = 256


class TaskService(tasks_pb2_grpc.TaskServiceServicer):  # type: ignore[misc]
    def __init__(
        self, lifecycle: Lifecycle, settings: Settings, telemetry: Telemetry | None = None
    ) -> None:
        self._lc = lifecycle
        self._settings = settings
        self._telemetry = telemetry or Telemetry()

    def _validate(self, req: tasks_pb2.CreateTaskRequest, trace: dict[str, str]) -> Task:
        now = self._lc.clock.now_ms()
        limits, shards = self._settings.limits, self._settings.shard_count
        return validation.create_task(req, limits, shards, now, trace)

    def _span(self, method: str, context: Ctx) -> contextlib.AbstractContextManager[dict[str, str]]:
        metadata = context.invocation_metadata() or ()
        return self._telemetry.call_span(f"tikk.v1.TaskService/{method}", metadata)

    @maps_errors
    async def CreateTask(
        self, request: tasks_pb2.CreateTaskRequest, context: Ctx
    ) -> tasks_pb2.CreateTaskResponse:
        with self._span("CreateTask", context) as trace:
            task = self._validate(request, trace)
            # Before storing: a task accepted for a queue that cannot take it would be lost.
            await self._lc.queue.prepare([task.queue])
            task, created = await self._lc.create(task)
        return tasks_pb2.CreateTaskResponse(task=convert.task_to_proto(task), created=created)

    async def CreateTasks(
        self, request_iterator: AsyncIterator[tasks_pb2.CreateTasksRequest], context: Ctx
    ) -> tasks_pb2.CreateTasksResponse:
        response = tasks_pb2.CreateTasksResponse()
        index = 0
        try:
            # One span for the stream: every task it creates joins that span's trace.
            with self._span("CreateTasks", context) as trace:
                async for chunk in request_iterator:
                    await self._create_chunk(chunk, index, response, trace)
                    index += len(chunk.tasks)
        except TikkError as exc:
            # A backend failure mid-stream: everything before this chunk is stored and was
            # counted; report the failure rather than a partial success.
            await context.abort(code_of(exc), f"after {index} items: {exc}")
        return response

    async def _create_chunk(
        self,
        chunk: tasks_pb2.CreateTasksRequest,
        first: int,
        out: tasks_pb2.CreateTasksResponse,
        trace: dict[str, str],
    ) -> None:
        # Requests without an id get fresh server-assigned ones, which need no existence check.
        given: list[tuple[int, Task]] = []
        assigned: list[tuple[int, Task]] = []
        for offset, req in enumerate(chunk.tasks):
            try:
                task = self._validate(req, trace)
                (given if req.task_id else assigned).append((first + offset, task))
            except InvalidArgument as exc:
                _item(out, first + offset, exc, req.task_id)
        refused = await self._prepare_each({t.queue for _, t in [*given, *assigned]})
        for items, new_ids in ((given, False), (assigned, True)):
            kept = _drop_refused(items, refused, out, ids_given=not new_ids)
            outcomes = await self._lc.create_many([t for _, t in kept], new_ids=new_ids)
            for (index, task), outcome in zip(kept, outcomes, strict=True):
                if isinstance(outcome, TikkError):
                    _item(out, index, outcome, task.task_id)
                    continue
                out.results.append(
                    tasks_pb2.CreateTasksItemResult(
                        index=index, task_id=outcome[0].task_id, created=outcome[1]
                    )
                )
                out.accepted += 1
        out.results.sort(key=lambda r: r.index)

    async def _prepare_each(self, queues: set[str]) -> dict[str, TikkError]:
        """Prepare each of ``queues`` on its own, so that one that fails holds up no other;
        returns the error of each that failed."""
        ordered = sorted(queues)
        outcomes = await asyncio.gather(
            *(self._lc.queue.prepare([q]) for q in ordered), return_exceptions=True
        )
        refused: dict[str, TikkError] = {}
        for queue, outcome in zip(ordered, outcomes, strict=True):
            if isinstance(outcome, TikkError):
                refused[queue] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
        return refused

    @maps_errors
    async def GetTask(self, request: tasks_pb2.GetTaskRequest, context: Ctx) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._settings.limits)
        return convert.task_to_proto(await self._lc.store.get(ns, tid))

    @maps_errors
    async def CancelTask(
        self, request: tasks_pb2.CancelTaskRequest, context: Ctx
    ) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._settings.limits)
        return convert.task_to_proto(await self._lc.cancel(ns, tid))

    @maps_errors
    async def ListTasks(
        self, request: tasks_pb2.ListTasksRequest, context: Ctx
    ) -> tasks_pb2.ListTasksResponse:
        ns = validation.namespace(request.namespace)
        queue = validation.queue(request.queue, self._settings.limits)
        state = validation.task_state(request.state)
        size = page_size(request.page_size)
        page = await self._lc.store.list_tasks(ns, queue, state, size, request.page_token)
        return tasks_pb2.ListTasksResponse(
            tasks=[convert.task_to_proto(t) for t in page.items], next_page_token=page.next_token
        )

    @maps_errors
    async def ListQueues(
        self, request: tasks_pb2.ListQueuesRequest, context: Ctx
    ) -> tasks_pb2.ListQueuesResponse:
        size = page_size(request.page_size)
        token = decode_token(request.page_token, (str,))
        after = str(token[0]) if token else ""
        backlog = [b for b in await self._lc.queue.backlog() if b.queue > after]
        now = self._lc.clock.now_ms()
        page = backlog[:size]
        more = len(backlog) > size
        return tasks_pb2.ListQueuesResponse(
            queues=[_queue_to_proto(b, now) for b in page],
            next_page_token=encode_token(page[-1].queue) if more else "",
        )


def _queue_to_proto(b: QueueBacklog, now_ms: int) -> tasks_pb2.QueueInfo:
    info = tasks_pb2.QueueInfo(name=b.queue, waiting=b.waiting)
    if b.oldest_enqueued_ms is not None:
        info.oldest_waiting_age.CopyFrom(to_duration(max(0, now_ms - b.oldest_enqueued_ms)))
    if b.consumers is not None:
        info.consumers = b.consumers
    return info


def _drop_refused(
    items: list[tuple[int, Task]],
    refused: dict[str, TikkError],
    out: tasks_pb2.CreateTasksResponse,
    *,
    ids_given: bool,
) -> list[tuple[int, Task]]:
    """``items`` whose queue was prepared; the others get their queue's error as result."""
    kept = []
    for index, task in items:
        if task.queue in refused:
            _item(out, index, refused[task.queue], task.task_id if ids_given else "")
        else:
            kept.append((index, task))
    return kept


def _item(out: tasks_pb2.CreateTasksResponse, index: int, exc: TikkError, task_id: str) -> None:
    out.results.append(
        tasks_pb2.CreateTasksItemResult(
            index=index, code=numeric(code_of(exc)), message=str(exc), task_id=task_id
        )
    )
    out.rejected += 1


class HistoryService(history_pb2_grpc.HistoryServiceServicer):  # type: ignore[misc]
    def __init__(self, lifecycle: Lifecycle, settings: Settings) -> None:
        self._lc = lifecycle
        self._limits = settings.limits

    @maps_errors
    async def ListTaskRuns(
        self, request: history_pb2.ListTaskRunsRequest, context: Ctx
    ) -> history_pb2.ListRunsResponse:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._limits)
        size = page_size(request.page_size)
        page = await self._lc.history.list_for_task(ns, tid, size, request.page_token)
        return _runs(page.items, page.next_token)

    @maps_errors
    async def ListRuns(
        self, request: history_pb2.ListRunsRequest, context: Ctx
    ) -> history_pb2.ListRunsResponse:
        ns = validation.namespace(request.namespace)
        queue = validation.queue(request.queue, self._limits)
        status = validation.run_status(request.status)
        start, end = _time_range(request, self._lc.clock.now_ms(), _HOUR_MS)
        query = RunQuery(ns, queue, start, end, RunStatus(status) if status else None)
        size = page_size(request.page_size)
        page = await self._lc.history.list_by_queue(query, size, request.page_token)
        return _runs(page.items, page.next_token)

    @maps_errors
    async def GetRun(self, request: history_pb2.GetRunRequest, context: Ctx) -> history_pb2.Run:
        ns = validation.namespace(request.namespace)
        if not request.run_id:
            raise InvalidArgument("run_id", "must not be empty")
        return convert.run_to_proto(await self._lc.history.get(ns, request.run_id))

    @maps_errors
    async def ListDeadLetters(
        self, request: history_pb2.ListDeadLettersRequest, context: Ctx
    ) -> history_pb2.ListDeadLettersResponse:
        ns = validation.namespace(request.namespace)
        queue = validation.queue(request.queue, self._limits) if request.queue else ""
        size = page_size(request.page_size)
        now = self._lc.clock.now_ms()
        page = await self._lc.store.list_dead_letters(ns, queue, size, request.page_token, now)
        return history_pb2.ListDeadLettersResponse(
            tasks=[convert.task_to_proto(t) for t in page.items], next_page_token=page.next_token
        )

    @maps_errors
    async def RedriveTask(
        self, request: history_pb2.RedriveTaskRequest, context: Ctx
    ) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._limits)
        return convert.task_to_proto(await self._lc.redrive(ns, tid))

    @maps_errors
    async def ListScheduleOccurrences(
        self, request: history_pb2.ListScheduleOccurrencesRequest, context: Ctx
    ) -> history_pb2.ListScheduleOccurrencesResponse:
        ns = validation.namespace(request.namespace)
        if not request.schedule_id:
            raise InvalidArgument("schedule_id", "must not be empty")
        start, end = _time_range(request, self._lc.clock.now_ms(), _OCCURRENCE_RANGE_MS)
        outcome = validation.occurrence_outcome(request.outcome)
        query = OccurrenceQuery(ns, request.schedule_id, start, end, outcome)
        size = page_size(request.page_size)
        page = await self._lc.history.list_occurrences(query, size, request.page_token)
        return history_pb2.ListScheduleOccurrencesResponse(
            occurrences=[convert.occurrence_to_proto(r) for r in page.items],
            next_page_token=page.next_token,
        )


def _time_range(request: Any, now_ms: int, default_span_ms: int) -> tuple[int, int]:
    """[start_time, end_time) of a history query: by default the span up to now."""
    end = validation.optional_timestamp_ms(request, "end_time")
    end = now_ms + 1 if end is None else end
    start = validation.optional_timestamp_ms(request, "start_time")
    start = end - default_span_ms if start is None else start
    if start >= end:
        raise InvalidArgument("start_time", "must be before end_time")
    return start, end


def _runs(items: list[Any], token: str) -> history_pb2.ListRunsResponse:
    return history_pb2.ListRunsResponse(
        runs=[convert.run_to_proto(r) for r in items], next_page_token=token
    )


class WorkerService(worker_pb2_grpc.WorkerServiceServicer):  # type: ignore[misc]
    def __init__(self, lifecycle: Lifecycle, settings: Settings) -> None:
        self._lc = lifecycle
        self._settings = settings

    @maps_errors
    async def GetWorkerConfig(
        self, request: worker_pb2.GetWorkerConfigRequest, context: Ctx
    ) -> worker_pb2.GetWorkerConfigResponse:
        return worker_pb2.GetWorkerConfigResponse(
            queue_url=self._settings.queue_url,
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

    async def _record_one(
        self, result: worker_pb2.RunResult, acks: asyncio.Queue[worker_pb2.ResultAck | None]
    ) -> None:
        try:
            report = self._report(result)
            if report.kind is ResultKind.STARTED:
                acks.put_nowait(await self._start(report))
                return
            await self._lc.record_result(report)
            acks.put_nowait(worker_pb2.ResultAck(run_id=result.run_id))
        except TikkError as exc:
            log.warning("result %s not recorded: %s", result.run_id, exc)
            acks.put_nowait(
                worker_pb2.ResultAck(
                    run_id=result.run_id, code=numeric(code_of(exc)), message=str(exc)
                )
            )

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
