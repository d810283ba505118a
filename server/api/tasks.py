"""``tikk.v1.TaskService``: create, read, cancel and list tasks; list the ready queues."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from server.api import validation
from server.api.imports import import_batch, refuse_batch
from server.api.messages import task_to_proto
from server.api.status import Ctx, bounded, code_of, idle_bounded, maps_errors, numeric
from server.batching import answer_in_order
from server.quotas import QuotaGate
from server.results import Lifecycle
from tikk.errors import InvalidArgument, ResourceExhausted, TikkError
from tikk.model import Task
from tikk.paging import decode_token, encode_token
from tikk.ready_queue import QueueBacklog
from tikk.settings import Settings
from tikk.telemetry import Telemetry
from tikk.timestamps import to_duration
from tikk.v1 import tasks_pb2, tasks_pb2_grpc


class TaskService(tasks_pb2_grpc.TaskServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        lifecycle: Lifecycle,
        settings: Settings,
        quotas: QuotaGate,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._lc = lifecycle
        self._settings = settings
        self._quotas = quotas
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
            async with self._quotas.creating({task.namespace: 1}):
                task, created = await self._lc.create(task)
        return tasks_pb2.CreateTaskResponse(task=task_to_proto(task), created=created)

    async def CreateTasks(
        self, request_iterator: AsyncIterator[tasks_pb2.CreateTasksRequest], context: Ctx
    ) -> tasks_pb2.CreateTasksResponse:
        response = tasks_pb2.CreateTasksResponse()
        index, cap = 0, self._settings.limits.max_create_tasks_per_stream
        chunks = idle_bounded(request_iterator, self._settings.deadlines.stream_idle_ms)
        try:
            # One span for the stream: every task it creates joins that span's trace.
            with self._span("CreateTasks", context) as trace:
                async for chunk in chunks:
                    items = chunk.tasks[: max(0, cap - index)]
                    await self._bounded_chunk(items, index, response, trace)
                    index += len(items)
                    if len(items) < len(chunk.tasks):
                        _item(response, index, _over_stream_cap(cap, index), "")
                        break
        except TikkError as exc:
            # A backend failure mid-stream: everything before this chunk is stored and was
            # counted; report the failure rather than a partial success.
            await context.abort(code_of(exc), f"after {index} items: {exc}")
        return response

    async def ImportTasks(
        self, request_iterator: AsyncIterator[tasks_pb2.ImportTasksRequest], context: Ctx
    ) -> AsyncIterator[tasks_pb2.ImportTasksResponse]:
        limits, deadlines = self._settings.limits, self._settings.deadlines
        claimed: set[str] = set()  # namespaces this stream counts against import_streams
        with self._span("ImportTasks", context) as trace:

            async def one(batch: tasks_pb2.ImportTasksRequest) -> tasks_pb2.ImportTasksResponse:
                try:
                    await self._claim_import_streams(batch, claimed)
                except ResourceExhausted as exc:
                    return refuse_batch(batch, exc)
                return await import_batch(batch, limits.max_import_batch, self._bounded_chunk,
                                          trace)  # fmt: skip

            batches = idle_bounded(request_iterator, deadlines.stream_idle_ms)
            try:
                async for answer in answer_in_order(batches, one, limits.import_window):
                    yield answer
            except TikkError as exc:
                await context.abort(code_of(exc), str(exc))
            finally:
                self._quotas.release_import_streams(claimed)

    async def _claim_import_streams(
        self, batch: tasks_pb2.ImportTasksRequest, claimed: set[str]
    ) -> None:
        for given in sorted({req.namespace for req in batch.tasks}):
            with contextlib.suppress(InvalidArgument):  # refused with its item later
                namespace = validation.namespace(given)
                await self._quotas.claim_import_stream(namespace, claimed)

    async def _bounded_chunk(
        self,
        chunk: Sequence[tasks_pb2.CreateTaskRequest],
        first: int,
        out: tasks_pb2.CreateTasksResponse,
        trace: dict[str, str],
    ) -> None:
        """``_create_chunk`` within the server's bound on one message of a stream."""
        work = self._create_chunk(chunk, first, out, trace)
        await bounded(work, self._settings.deadlines.call_ms, "a batch of creates")

    async def _create_chunk(
        self,
        chunk: Sequence[tasks_pb2.CreateTaskRequest],
        first: int,
        out: tasks_pb2.CreateTasksResponse,
        trace: dict[str, str],
    ) -> None:
        # Requests without an id get fresh server-assigned ones, which need no existence check.
        given: list[tuple[int, Task]] = []
        assigned: list[tuple[int, Task]] = []
        for offset, req in enumerate(chunk):
            try:
                task = self._validate(req, trace)
                (given if req.task_id else assigned).append((first + offset, task))
            except InvalidArgument as exc:
                _item(out, first + offset, exc, req.task_id)
        refused = await self._prepare_each({t.queue for _, t in [*given, *assigned]})
        given = _drop_refused(given, refused, out, ids_given=True)
        assigned = _drop_refused(assigned, refused, out, ids_given=False)
        # The whole chunk is admitted or refused before anything of it is written.
        async with self._quotas.creating(Counter(t.namespace for _, t in [*given, *assigned])):
            for kept, new_ids in ((given, False), (assigned, True)):
                outcomes = await self._lc.create_many([t for _, t in kept], new_ids=new_ids)
                _record_outcomes(out, kept, outcomes)
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
        return task_to_proto(await self._lc.store.get(ns, tid))

    @maps_errors
    async def CancelTask(
        self, request: tasks_pb2.CancelTaskRequest, context: Ctx
    ) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._settings.limits)
        return task_to_proto(await self._lc.cancel(ns, tid))

    @maps_errors
    async def ListTasks(
        self, request: tasks_pb2.ListTasksRequest, context: Ctx
    ) -> tasks_pb2.ListTasksResponse:
        ns = validation.namespace(request.namespace)
        queue = validation.queue(request.queue, self._settings.limits)
        state = validation.task_state(request.state)
        size = validation.listing_page_size(request.page_size, self._settings.limits)
        page = await self._lc.store.list_tasks(ns, queue, state, size, request.page_token)
        return tasks_pb2.ListTasksResponse(
            tasks=[task_to_proto(t) for t in page.items], next_page_token=page.next_token
        )

    @maps_errors
    async def ListQueues(
        self, request: tasks_pb2.ListQueuesRequest, context: Ctx
    ) -> tasks_pb2.ListQueuesResponse:
        size = validation.listing_page_size(request.page_size, self._settings.limits)
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


def _record_outcomes(
    out: tasks_pb2.CreateTasksResponse,
    kept: list[tuple[int, Task]],
    outcomes: list[tuple[Task, bool] | TikkError],
) -> None:
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


def _over_stream_cap(cap: int, index: int) -> TikkError:
    return ResourceExhausted(
        f"CreateTasks takes at most {cap:,} items per stream; item {index} and any after it "
        "were not read: send them again, or use ImportTasks for loads of any size"
    )
