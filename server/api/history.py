"""``tikk.v1.HistoryService``: runs, dead letters and schedule occurrences, and their
protobuf form, over ``server.ops.history`` (and ``server.ops.tasks`` for dead letters)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from server.api import validation
from server.api.messages import task_to_proto
from server.api.status import Ctx
from server.ops.history import HistoryOps
from server.ops.tasks import TaskOps
from tikk.clock import Clock
from tikk.errors import InvalidArgument
from tikk.model import Page, RunQuery, RunRecord, RunStatus
from tikk.schedules.model import OccurrenceQuery, OccurrenceRecord
from tikk.settings import Settings
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2

_HOUR_MS = 3_600_000
_OCCURRENCE_RANGE_MS = 30 * 86_400_000
# The bytes of runs one answer holds: under gRPC clients' default receive limit of 4 MiB.
_ANSWER_BUDGET = 3 * 1024 * 1024


class HistoryService(history_pb2_grpc.HistoryServiceServicer):  # type: ignore[misc]
    def __init__(
        self, history: HistoryOps, tasks: TaskOps, settings: Settings, clock: Clock
    ) -> None:
        self._history = history
        self._tasks = tasks
        self._limits = settings.limits
        self._clock = clock

    async def ListTaskRuns(
        self, request: history_pb2.ListTaskRunsRequest, context: Ctx
    ) -> history_pb2.ListRunsResponse:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._limits)
        size = validation.listing_page_size(request.page_size, self._limits)
        token = request.page_token
        page = await fitting(lambda n: self._history.runs_of_task(ns, tid, n, token), size)
        return _runs(page.items, page.next_token)

    async def ListRuns(
        self, request: history_pb2.ListRunsRequest, context: Ctx
    ) -> history_pb2.ListRunsResponse:
        ns = validation.namespace(request.namespace)
        queue = validation.queue(request.queue, self._limits)
        status = validation.run_status(request.status)
        now = self._clock.now_ms()
        start, end = validation.time_span(request, now, _HOUR_MS, self._limits)
        query = RunQuery(ns, queue, start, end, RunStatus(status) if status else None)
        size = validation.listing_page_size(request.page_size, self._limits)
        token = request.page_token
        page = await fitting(lambda n: self._history.runs(query, n, token), size)
        return _runs(page.items, page.next_token)

    async def GetRun(self, request: history_pb2.GetRunRequest, context: Ctx) -> history_pb2.Run:
        ns = validation.namespace(request.namespace)
        if not request.run_id:
            raise InvalidArgument("run_id", "must not be empty")
        return run_to_proto(await self._history.run(ns, request.run_id))

    async def ListDeadLetters(
        self, request: history_pb2.ListDeadLettersRequest, context: Ctx
    ) -> history_pb2.ListDeadLettersResponse:
        ns = validation.namespace(request.namespace)
        queue = validation.queue(request.queue, self._limits) if request.queue else ""
        size = validation.listing_page_size(request.page_size, self._limits)
        page = await self._tasks.dead_letters(ns, queue, size, request.page_token)
        return history_pb2.ListDeadLettersResponse(
            tasks=[task_to_proto(t) for t in page.items], next_page_token=page.next_token
        )

    async def RedriveTask(
        self, request: history_pb2.RedriveTaskRequest, context: Ctx
    ) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._limits)
        return task_to_proto(await self._tasks.redrive(ns, tid))

    async def PurgeDeadLetter(
        self, request: history_pb2.PurgeDeadLetterRequest, context: Ctx
    ) -> tasks_pb2.Task:
        ns = validation.namespace(request.namespace)
        tid = validation.task_id(request.task_id, self._limits)
        return task_to_proto(await self._tasks.purge(ns, tid))

    async def ListScheduleOccurrences(
        self, request: history_pb2.ListScheduleOccurrencesRequest, context: Ctx
    ) -> history_pb2.ListScheduleOccurrencesResponse:
        ns = validation.namespace(request.namespace)
        if not request.schedule_id:
            raise InvalidArgument("schedule_id", "must not be empty")
        now = self._clock.now_ms()
        start, end = validation.time_span(request, now, _OCCURRENCE_RANGE_MS, self._limits)
        outcome = validation.occurrence_outcome(request.outcome)
        query = OccurrenceQuery(ns, request.schedule_id, start, end, outcome)
        size = validation.listing_page_size(request.page_size, self._limits)
        page = await self._history.occurrences(query, size, request.page_token)
        return history_pb2.ListScheduleOccurrencesResponse(
            occurrences=[occurrence_to_proto(r) for r in page.items],
            next_page_token=page.next_token,
        )


async def fitting(read: Callable[[int], Awaitable[Page[RunRecord]]], size: int) -> Page[RunRecord]:
    """A page of up to ``size`` runs that fits in one answer. Runs carry up to 64 KiB of
    output and 16 KiB of traceback, so a page of a thousand could exceed what a gRPC client
    takes by default (4 MiB): when the page read is over ``_ANSWER_BUDGET``, the runs that fit
    are read again as a page of their own, whose token goes on from the last of them (a
    listing's token is made from its last item, so the shorter read ends where it should)."""
    page = await read(size)
    used = fits = 0
    for r in page.items:
        used += run_to_proto(r).ByteSize() + 16
        if used > _ANSWER_BUDGET:
            break
        fits += 1
    return page if fits == len(page.items) else await read(max(1, fits))


def _runs(items: list[RunRecord], token: str) -> history_pb2.ListRunsResponse:
    return history_pb2.ListRunsResponse(
        runs=[run_to_proto(r) for r in items], next_page_token=token
    )


def run_to_proto(r: RunRecord) -> history_pb2.Run:
    return history_pb2.Run(
        namespace=r.namespace,
        run_id=r.run_id,
        task_id=r.task_id,
        queue=r.queue,
        handler=r.handler,
        attempt=r.attempt,
        status=int(r.status),  # type: ignore[arg-type]
        scheduled_time=to_timestamp(r.scheduled_ms),
        due_time=to_timestamp(r.due_ms),
        fired_time=to_timestamp(r.fired_ms),
        start_time=to_timestamp(r.started_ms),
        finish_time=to_timestamp(r.finished_ms),
        record_time=to_timestamp(r.recorded_ms),
        worker_id=r.worker_id,
        error_type=r.error_type,
        error_message=r.error_message,
        output=r.output,
        idempotency_key=r.idempotency_key,
        traceback=r.traceback,
    )


def occurrence_to_proto(r: OccurrenceRecord) -> history_pb2.ScheduleOccurrence:
    return history_pb2.ScheduleOccurrence(
        namespace=r.namespace,
        schedule_id=r.schedule_id,
        nominal_time=to_timestamp(r.nominal_ms),
        fire_time=to_timestamp(r.fire_ms),
        outcome=int(r.outcome),  # type: ignore[arg-type]
        decide_time=to_timestamp(r.decided_ms),
        lateness=to_duration(r.lateness_ms),
        task_id=r.task_id,
        reason=r.reason,
    )
