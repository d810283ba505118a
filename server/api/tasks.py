"""``tikk.v1.TaskService``: create, read, cancel and list tasks; list the ready queues.

Creates of every kind (one, a ``CreateTasks`` stream, an ``ImportTasks`` stream) are validated
here and go to ``TaskOps.create_many`` a chunk at a time; what each item came to is reported
per item.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from server.api import validation
from server.api.bulk_fields import label_selector
from server.api.imports import import_batch
from server.api.messages import task_to_proto
from server.api.queues import queue_change, queue_to_proto
from server.api.status import Ctx, bounded, code_of, detail_of, idle_bounded, numeric
from server.api.streams import answer_in_order
from server.ops.queues import QueueOps
from server.ops.task_search import TaskSearch
from server.ops.tasks import Created, TaskOps
from tikk.clock import Clock
from tikk.errors import InvalidArgument, ResourceExhausted, TikkError
from tikk.model import Task
from tikk.settings import Settings
from tikk.task_filters import TaskFilter
from tikk.telemetry import Telemetry
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

# Creates a chunk's valid tasks: ``TaskOps.create_many``, or an import stream's.
CreateMany = Callable[[Sequence[Task]], Awaitable[list[Created]]]


class TaskService(tasks_pb2_grpc.TaskServiceServicer):  # type: ignore[misc]
    def __init__(
        self, tasks: TaskOps, search: TaskSearch, queues: QueueOps, settings: Settings,
        clock: Clock, *, telemetry: Telemetry,
    ) -> None:  # fmt: skip
        self._tasks = tasks
        self._search = search
        self._queues = queues
        self._settings = settings
        self._clock = clock
        self._telemetry = telemetry

    def _validate(self, req: tasks_pb2.CreateTaskRequest, trace: dict[str, str]) -> Task:
        """The new task ``req`` asks for, carrying ``trace``: the context of the call that
        creates it (``Telemetry.current_trace``)."""
        now = self._clock.now_ms()
        limits, shards = self._settings.limits, self._settings.shard_count
        return validation.create_task(req, limits, shards, now, trace)

    async def CreateTask(
        self, request: tasks_pb2.CreateTaskRequest, context: Ctx
    ) -> tasks_pb2.CreateTaskResponse:
        task = self._validate(request, self._telemetry.current_trace())
        task, created = await self._tasks.create(task)
        return tasks_pb2.CreateTaskResponse(task=task_to_proto(task), created=created)

    async def CreateTasks(
        self, request_iterator: AsyncIterator[tasks_pb2.CreateTasksRequest], context: Ctx
    ) -> tasks_pb2.CreateTasksResponse:
        response = tasks_pb2.CreateTasksResponse()
        index, cap = 0, self._settings.limits.max_create_tasks_per_stream
        chunks = idle_bounded(request_iterator, self._settings.deadlines.stream_idle_ms)
        try:
            async for chunk in chunks:
                items = chunk.tasks[: max(0, cap - index)]
                await self._create_chunk(items, index, response, self._tasks.create_many)
                index += len(items)
                if len(items) < len(chunk.tasks):
                    _item(response, index, _over_stream_cap(cap, index), "")
                    break
        except TikkError as exc:
            # A backend failure mid-stream: everything before this chunk is stored and was
            # counted; report the failure, and how far it got, rather than a partial success.
            await context.abort(code_of(exc), f"after {index} items: {exc}")
        return response

    async def ImportTasks(
        self, request_iterator: AsyncIterator[tasks_pb2.ImportTasksRequest], context: Ctx
    ) -> AsyncIterator[tasks_pb2.ImportTasksResponse]:
        limits, deadlines = self._settings.limits, self._settings.deadlines
        async with self._tasks.importing() as stream:

            async def one(batch: tasks_pb2.ImportTasksRequest) -> tasks_pb2.ImportTasksResponse:
                return await import_batch(
                    batch, limits.max_import_batch,
                    lambda chunk, out: self._create_chunk(chunk, 0, out, stream.create_many),
                )  # fmt: skip

            batches = idle_bounded(request_iterator, deadlines.stream_idle_ms)
            async for answer in answer_in_order(batches, one, limits.import_window):
                yield answer

    async def _create_chunk(
        self,
        chunk: Sequence[tasks_pb2.CreateTaskRequest],
        first: int,
        out: tasks_pb2.CreateTasksResponse,
        create: CreateMany,
    ) -> None:
        """Validate and create ``chunk`` (indexes from ``first``), a result per item in
        ``out``, within the server's bound on one message of a stream."""
        valid: list[tuple[int, Task]] = []
        trace = self._telemetry.current_trace()
        for offset, req in enumerate(chunk):
            try:
                valid.append((first + offset, self._validate(req, trace)))
            except InvalidArgument as exc:
                _item(out, first + offset, exc, req.task_id)
        work = create([task for _, task in valid])
        outcomes = await bounded(work, self._settings.deadlines.call_ms, "a batch of creates")
        _record_outcomes(out, valid, outcomes)
        out.results.sort(key=lambda r: r.index)

    async def GetTask(self, request: tasks_pb2.GetTaskRequest, context: Ctx) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._settings.limits)
        return task_to_proto(await self._tasks.get(ns, tid))

    async def CancelTask(
        self, request: tasks_pb2.CancelTaskRequest, context: Ctx
    ) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._settings.limits)
        stop = request.stop_running
        return task_to_proto(await self._tasks.cancel(ns, tid, stop_running=stop))

    async def RescheduleTask(
        self, request: tasks_pb2.RescheduleTaskRequest, context: Ctx
    ) -> tasks_pb2.Task:
        limits = self._settings.limits
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, limits)
        if request.WhichOneof("when") is None:
            raise InvalidArgument("run_at", "give run_at or delay: the task's new due time")
        at = validation.requested_time(request, limits, self._clock.now_ms())
        payload = request.payload if request.HasField("payload") else None
        if payload is not None and len(payload) > limits.max_payload_bytes:
            raise InvalidArgument("payload", f"larger than {limits.max_payload_bytes} bytes")
        return task_to_proto(await self._tasks.reschedule(ns, tid, at, payload))

    async def ListTasks(
        self, request: tasks_pb2.ListTasksRequest, context: Ctx
    ) -> tasks_pb2.ListTasksResponse:
        ns = validation.namespace(request.namespace)
        limits = self._settings.limits
        state = validation.task_state(request.state)
        size = validation.listing_page_size(request.page_size, limits)
        if request.label_selector:  # through the label index, the queue a filter
            queue = validation.queue(request.queue, limits) if request.queue else ""
            labels = label_selector(request.label_selector)
            found = TaskFilter(ns, queue, labels, state)
            page, _ = await self._search.page(found, size, request.page_token)
        else:
            queue = validation.queue(request.queue, limits)
            page = await self._tasks.list_tasks(ns, queue, state, size, request.page_token)
        return tasks_pb2.ListTasksResponse(
            tasks=[task_to_proto(t) for t in page.items], next_page_token=page.next_token
        )

    async def ListQueues(
        self, request: tasks_pb2.ListQueuesRequest, context: Ctx
    ) -> tasks_pb2.ListQueuesResponse:
        size = validation.listing_page_size(request.page_size, self._settings.limits)
        page = await self._queues.queues(size, request.page_token)
        now = self._clock.now_ms()
        return tasks_pb2.ListQueuesResponse(
            queues=[queue_to_proto(q, now) for q in page.items], next_page_token=page.next_token
        )

    async def UpdateQueue(
        self, request: tasks_pb2.UpdateQueueRequest, context: Ctx
    ) -> tasks_pb2.QueueInfo:
        queue, change = queue_change(request, self._settings.limits)
        return queue_to_proto(await self._queues.update(queue, change), self._clock.now_ms())


def _record_outcomes(
    out: tasks_pb2.CreateTasksResponse, valid: list[tuple[int, Task]], outcomes: list[Created]
) -> None:
    for (index, task), outcome in zip(valid, outcomes, strict=True):
        if isinstance(outcome, TikkError):
            # An id the server chose means nothing to the client: it is not echoed.
            _item(out, index, outcome, "" if task.id_assigned else task.task_id)
            continue
        out.results.append(
            tasks_pb2.CreateTasksItemResult(
                index=index, task_id=outcome[0].task_id, created=outcome[1]
            )
        )
        out.accepted += 1


def _item(out: tasks_pb2.CreateTasksResponse, index: int, exc: TikkError, task_id: str) -> None:
    out.results.append(
        tasks_pb2.CreateTasksItemResult(
            index=index, code=numeric(code_of(exc)), message=detail_of(exc), task_id=task_id
        )
    )
    out.rejected += 1


def _over_stream_cap(cap: int, index: int) -> TikkError:
    return ResourceExhausted(
        f"CreateTasks takes at most {cap:,} items per stream; item {index} and any after it "
        "were not read: send them again, or use ImportTasks for loads of any size"
    )
