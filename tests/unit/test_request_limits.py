"""Request limits through a real gRPC server on the embedded backends: page sizes, history
spans, backfill spans, bytes per request and items per batch are settings, and a request
over one is refused with the limit named, never trimmed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.embedded_api import embedded_api, embedded_settings
from tikk.clock import SystemClock
from tikk.settings import Limits
from tikk.timestamps import to_timestamp
from tikk.v1 import (
    history_pb2,
    history_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

DAY_MS = 86_400_000
LIMITS = Limits(
    max_page_size=5, default_page_size=2, max_request_bytes=64 * 1024, max_result_batch=2,
    max_backfill_span_ms=2 * DAY_MS, max_backfill_occurrences=3,
)  # fmt: skip


@dataclass
class Api:
    tasks: Any
    history: Any
    schedules: Any
    worker: Any


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with embedded_api(embedded_settings(tmp_path, limits=LIMITS)) as served:
        channel = served.channel
        yield Api(
            tasks_pb2_grpc.TaskServiceStub(channel),
            history_pb2_grpc.HistoryServiceStub(channel),
            schedules_pb2_grpc.ScheduleServiceStub(channel),
            worker_pb2_grpc.WorkerServiceStub(channel),
        )


async def status_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call
    return failure.value.code(), failure.value.details() or ""


def now_ms() -> int:
    return SystemClock().now_ms()


async def test_a_page_over_the_maximum_is_refused_on_every_listing(api: Api) -> None:
    listings = [
        api.tasks.ListTasks(tasks_pb2.ListTasksRequest(queue="q", page_size=6)),
        api.tasks.ListQueues(tasks_pb2.ListQueuesRequest(page_size=6)),
        api.history.ListRuns(history_pb2.ListRunsRequest(queue="q", page_size=6)),
        api.history.ListTaskRuns(history_pb2.ListTaskRunsRequest(task_id="t", page_size=6)),
        api.history.ListDeadLetters(history_pb2.ListDeadLettersRequest(page_size=6)),
        api.history.ListScheduleOccurrences(
            history_pb2.ListScheduleOccurrencesRequest(schedule_id="s", page_size=6)
        ),
        api.schedules.ListSchedules(schedules_pb2.ListSchedulesRequest(page_size=6)),
    ]
    for call in listings:
        code, details = await status_of(call)
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert "page_size" in details and "5" in details


async def test_a_page_size_within_the_maximum_and_the_default_are_served(api: Api) -> None:
    for i in range(3):
        await api.tasks.CreateTask(tasks_pb2.CreateTaskRequest(task_id=f"t{i}", queue="q",
                                                               handler="h"))  # fmt: skip
    full = await api.tasks.ListTasks(tasks_pb2.ListTasksRequest(queue="q", page_size=5))
    assert len(full.tasks) == 3
    default = await api.tasks.ListTasks(tasks_pb2.ListTasksRequest(queue="q"))
    assert len(default.tasks) == 2 and default.next_page_token


async def test_a_history_span_over_31_days_is_refused_naming_the_limit(api: Api) -> None:
    end = now_ms()
    month = history_pb2.ListRunsRequest(
        queue="q", start_time=to_timestamp(end - 31 * DAY_MS), end_time=to_timestamp(end)
    )
    await api.history.ListRuns(month)  # exactly the limit
    for start in (end - 32 * DAY_MS, -62135596800000):  # a day over; the year 1
        req = history_pb2.ListRunsRequest(
            queue="q", start_time=to_timestamp(start), end_time=to_timestamp(end)
        )
        code, details = await status_of(api.history.ListRuns(req))
        assert code is grpc.StatusCode.INVALID_ARGUMENT
        assert "31 days" in details and "max_history_span" in details
    occurrences = history_pb2.ListScheduleOccurrencesRequest(
        schedule_id="s", start_time=to_timestamp(end - 40 * DAY_MS)
    )
    code, details = await status_of(api.history.ListScheduleOccurrences(occurrences))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "31 days" in details


async def test_an_open_ended_history_query_covers_a_bounded_default_span(api: Api) -> None:
    only_end = history_pb2.ListRunsRequest(queue="q", end_time=to_timestamp(now_ms()))
    assert not (await api.history.ListRuns(only_end)).next_page_token
    nothing = history_pb2.ListScheduleOccurrencesRequest(schedule_id="s")
    assert not (await api.history.ListScheduleOccurrences(nothing)).occurrences


async def test_a_backfill_over_its_span_or_occurrence_limit_is_refused(api: Api) -> None:
    hourly = schedules_pb2.Schedule(id="h", queue="q", handler="h",
                                    spec=schedules_pb2.ScheduleSpec(cron="0 * * * *"))  # fmt: skip
    await api.schedules.CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=hourly))
    end = now_ms() // 3_600_000 * 3_600_000

    def backfill(start: int) -> Any:
        return api.schedules.BackfillSchedule(schedules_pb2.BackfillScheduleRequest(
            schedule_id="h", start_time=to_timestamp(start), end_time=to_timestamp(end)
        ))  # fmt: skip

    code, details = await status_of(backfill(end - 3 * DAY_MS))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "max_backfill_span" in details
    code, details = await status_of(backfill(end - 4 * 3_600_000))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "max_backfill_occurrences" in details
    done = await backfill(end - 3 * 3_600_000)
    assert (done.created, done.existing) == (3, 0)


async def test_a_request_over_the_byte_limit_is_resource_exhausted_and_not_stored(
    api: Api,
) -> None:
    big = tasks_pb2.CreateTaskRequest(task_id="big", queue="q", handler="h",
                                      payload=b"x" * (100 * 1024))  # fmt: skip
    code, _ = await status_of(api.tasks.CreateTask(big))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    code, _ = await status_of(api.tasks.GetTask(tasks_pb2.GetTaskRequest(task_id="big")))
    assert code is grpc.StatusCode.NOT_FOUND
    small = tasks_pb2.CreateTaskRequest(task_id="small", queue="q", handler="h",
                                        payload=b"x" * (32 * 1024))  # fmt: skip
    assert (await api.tasks.CreateTask(small)).created


async def test_a_result_batch_over_the_item_limit_is_refused_whole(api: Api) -> None:
    batch = worker_pb2.RunResultBatch(
        results=[worker_pb2.RunResult(run_id=f"r{i}") for i in range(3)]
    )
    answers = [a async for a in api.worker.ReportResultBatches(iter([batch]))]
    codes = {ack.code for ack in answers[0].acks}
    assert codes == {grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]}
    assert "max_result_batch" in answers[0].acks[0].message
    assert [ack.run_id for ack in answers[0].acks] == ["r0", "r1", "r2"]
