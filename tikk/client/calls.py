"""Every unary and paged call of the client as data: which RPC, what it sends, how its answer
becomes the result. The blocking and the asyncio client both run these, so the two cannot
drift apart; each only knows how to send one call. A listing's pages are calls of its own
(``Paged.page``), which the listings (``listings``) walk or fetch one at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from tikk.client.results import Backfilled, Page, TaskCreated
from tikk.client.specs import Recurrence, ScheduleDefinition, TaskSelection, TaskSpec
from tikk.client.wire import (
    duration,
    enum_name,
    payload_bytes,
    schedule_message,
    selection_message,
    spec_message,
    task_request,
    time_range,
    timestamp,
)
from tikk.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    bulk_pb2,
    bulk_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
)

R = TypeVar("R")
T = TypeVar("T")
Service = Literal["tasks", "schedules", "history", "admin", "bulk"]


def stubs(channel: Any) -> dict[Service, Any]:
    """The stub of each service on ``channel`` (blocking or asyncio alike)."""
    return {
        "tasks": tasks_pb2_grpc.TaskServiceStub(channel),
        "schedules": schedules_pb2_grpc.ScheduleServiceStub(channel),
        "history": history_pb2_grpc.HistoryServiceStub(channel),
        "admin": admin_pb2_grpc.AdminServiceStub(channel),
        "bulk": bulk_pb2_grpc.BulkServiceStub(channel),
    }


def _same(answer: Any) -> Any:
    return answer


@dataclass(frozen=True)
class Unary(Generic[R]):
    """One unary RPC: ``service``'s ``method`` with ``request``; ``unwrap`` makes the result."""

    service: Service
    method: str
    request: Any
    unwrap: Callable[[Any], R] = _same


@dataclass(frozen=True)
class Paged(Generic[T]):
    """A listing RPC: ``request`` without its page token, and the ``items`` of an answer."""

    service: Service
    method: str
    request: Any
    items: Callable[[Any], Iterable[T]]

    def page(self, token: str) -> Unary[Page[T]]:
        """The call that fetches the page at ``token`` ("" for the first)."""
        request = type(self.request)()
        request.CopyFrom(self.request)
        request.page_token = token
        return Unary(self.service, self.method, request, self._page)

    def _page(self, answer: Any) -> Page[T]:
        return Page(list(self.items(answer)), answer.next_page_token, answer)


@dataclass(frozen=True)
class Calls:
    """The calls of one namespace ("" means the server's default)."""

    namespace: str

    def create_task(self, task: TaskSpec | tasks_pb2.CreateTaskRequest) -> Unary[TaskCreated]:
        def unwrap(answer: Any) -> TaskCreated:
            return TaskCreated(task=answer.task, created=answer.created)

        return Unary("tasks", "CreateTask", task_request(task, self.namespace), unwrap)

    def get_task(self, task_id: str) -> Unary[tasks_pb2.Task]:
        return Unary(
            "tasks", "GetTask", tasks_pb2.GetTaskRequest(namespace=self.namespace, task_id=task_id)
        )

    def cancel_task(self, task_id: str, stop_running: bool = False) -> Unary[tasks_pb2.Task]:
        request = tasks_pb2.CancelTaskRequest(
            namespace=self.namespace, task_id=task_id, stop_running=stop_running
        )
        return Unary("tasks", "CancelTask", request)

    def reschedule_task(
        self,
        task_id: str,
        run_at: datetime | None,
        delay: timedelta | None,
        payload: object | None,
    ) -> Unary[tasks_pb2.Task]:
        request = tasks_pb2.RescheduleTaskRequest(namespace=self.namespace, task_id=task_id)
        if (run_at is None) == (delay is None):
            raise ValueError("give run_at or delay (one of them)")
        if run_at is not None:
            request.run_at.CopyFrom(timestamp(run_at, "run_at"))
        if delay is not None:
            request.delay.CopyFrom(duration(delay))
        if payload is not None:
            request.payload = payload_bytes(payload)
        return Unary("tasks", "RescheduleTask", request)

    def list_tasks(
        self, queue: str, state: str | int | None, size: int, labels: str = ""
    ) -> Paged[tasks_pb2.Task]:
        request = tasks_pb2.ListTasksRequest(
            namespace=self.namespace, queue=queue, page_size=size, label_selector=labels,
            state=enum_name(tasks_pb2.TaskState, "TASK_STATE_", state),
        )  # fmt: skip
        return Paged("tasks", "ListTasks", request, lambda page: page.tasks)

    def list_queues(self, size: int) -> Paged[tasks_pb2.QueueInfo]:
        request = tasks_pb2.ListQueuesRequest(page_size=size)
        return Paged("tasks", "ListQueues", request, lambda page: page.queues)

    def update_queue(
        self,
        name: str,
        paused: bool | None,
        max_per_second: float | None,
        skip_older_than: timedelta | None,
    ) -> Unary[tasks_pb2.QueueInfo]:
        request = tasks_pb2.UpdateQueueRequest(name=name)
        if paused is not None:
            request.paused = paused
        if max_per_second is not None:
            request.max_per_second = max_per_second
        if skip_older_than is not None:
            request.skip_older_than.FromTimedelta(skip_older_than)
        return Unary("tasks", "UpdateQueue", request)

    def list_dead_letters(self, queue: str, size: int) -> Paged[tasks_pb2.Task]:
        request = history_pb2.ListDeadLettersRequest(
            namespace=self.namespace, queue=queue, page_size=size
        )
        return Paged("history", "ListDeadLetters", request, lambda page: page.tasks)

    def redrive_task(self, task_id: str) -> Unary[tasks_pb2.Task]:
        request = history_pb2.RedriveTaskRequest(namespace=self.namespace, task_id=task_id)
        return Unary("history", "RedriveTask", request)

    def purge_dead_letter(self, task_id: str) -> Unary[tasks_pb2.Task]:
        request = history_pb2.PurgeDeadLetterRequest(namespace=self.namespace, task_id=task_id)
        return Unary("history", "PurgeDeadLetter", request)

    def count_tasks(self, selection: TaskSelection) -> Unary[bulk_pb2.CountTasksResponse]:
        request = bulk_pb2.CountTasksRequest(filter=selection_message(selection, self.namespace))
        return Unary("bulk", "CountTasks", request)

    def bulk(
        self, method: str, selection: TaskSelection, dry_run: bool, action_id: str
    ) -> Unary[bulk_pb2.BulkAction]:
        """``method`` (BulkCancelTasks, BulkRedriveTasks, BulkPurgeTasks) of ``selection``."""
        request = bulk_pb2.BulkActionRequest(
            filter=selection_message(selection, self.namespace), dry_run=dry_run,
            action_id=action_id,
        )  # fmt: skip
        return Unary("bulk", method, request)

    def recount_usage(self, action_id: str) -> Unary[bulk_pb2.BulkAction]:
        request = bulk_pb2.RecountUsageRequest(namespace=self.namespace, action_id=action_id)
        return Unary("bulk", "RecountUsage", request)

    def get_bulk_action(self, action_id: str) -> Unary[bulk_pb2.BulkAction]:
        request = bulk_pb2.GetBulkActionRequest(namespace=self.namespace, id=action_id)
        return Unary("bulk", "GetBulkAction", request)

    def stop_bulk_action(self, action_id: str) -> Unary[bulk_pb2.BulkAction]:
        request = bulk_pb2.StopBulkActionRequest(namespace=self.namespace, id=action_id)
        return Unary("bulk", "StopBulkAction", request)

    def list_bulk_actions(self, size: int) -> Paged[bulk_pb2.BulkAction]:
        request = bulk_pb2.ListBulkActionsRequest(namespace=self.namespace, page_size=size)
        return Paged("bulk", "ListBulkActions", request, lambda page: page.actions)

    def get_run(self, run_id: str) -> Unary[history_pb2.Run]:
        return Unary(
            "history", "GetRun", history_pb2.GetRunRequest(namespace=self.namespace, run_id=run_id)
        )

    def list_task_runs(self, task_id: str, size: int) -> Paged[history_pb2.Run]:
        request = history_pb2.ListTaskRunsRequest(
            namespace=self.namespace, task_id=task_id, page_size=size
        )
        return Paged("history", "ListTaskRuns", request, lambda page: page.runs)

    def list_runs(
        self,
        queue: str,
        start: datetime | None,
        end: datetime | None,
        status: str | int | None,
        size: int,
    ) -> Paged[history_pb2.Run]:
        request = history_pb2.ListRunsRequest(
            namespace=self.namespace, queue=queue, page_size=size,
            status=enum_name(history_pb2.RunStatus, "RUN_STATUS_", status),
        )  # fmt: skip
        time_range(request, start, end)
        return Paged("history", "ListRuns", request, lambda page: page.runs)

    def create_schedule(self, definition: ScheduleDefinition) -> Unary[schedules_pb2.Schedule]:
        request = schedules_pb2.CreateScheduleRequest(
            schedule=schedule_message(definition, self.namespace)
        )
        return Unary("schedules", "CreateSchedule", request)

    def update_schedule(
        self, definition: ScheduleDefinition | schedules_pb2.Schedule, expected_version: str
    ) -> Unary[schedules_pb2.Schedule]:
        """A definition, or a schedule as read and changed (its namespace is this one's)."""
        if isinstance(definition, schedules_pb2.Schedule):
            message = schedules_pb2.Schedule()
            message.CopyFrom(definition)
            message.namespace = self.namespace
        else:
            message = schedule_message(definition, self.namespace)
        request = schedules_pb2.UpdateScheduleRequest(
            schedule=message, expected_version=expected_version
        )
        return Unary("schedules", "UpdateSchedule", request)

    def get_schedule(self, schedule_id: str) -> Unary[schedules_pb2.Schedule]:
        request = schedules_pb2.GetScheduleRequest(
            namespace=self.namespace, schedule_id=schedule_id
        )
        return Unary("schedules", "GetSchedule", request)

    def list_schedules(self, size: int) -> Paged[schedules_pb2.Schedule]:
        request = schedules_pb2.ListSchedulesRequest(namespace=self.namespace, page_size=size)
        return Paged("schedules", "ListSchedules", request, lambda page: page.schedules)

    def delete_schedule(self, schedule_id: str, expected_version: str) -> Unary[None]:
        request = schedules_pb2.DeleteScheduleRequest(
            namespace=self.namespace, schedule_id=schedule_id, expected_version=expected_version
        )
        return Unary("schedules", "DeleteSchedule", request, lambda _: None)

    def pause_schedule(self, schedule_id: str, note: str) -> Unary[schedules_pb2.Schedule]:
        request = schedules_pb2.PauseScheduleRequest(
            namespace=self.namespace, schedule_id=schedule_id, note=note
        )
        return Unary("schedules", "PauseSchedule", request)

    def resume_schedule(self, schedule_id: str) -> Unary[schedules_pb2.Schedule]:
        request = schedules_pb2.ResumeScheduleRequest(
            namespace=self.namespace, schedule_id=schedule_id
        )
        return Unary("schedules", "ResumeSchedule", request)

    def trigger_schedule(self, schedule_id: str) -> Unary[tasks_pb2.Task]:
        request = schedules_pb2.TriggerScheduleRequest(
            namespace=self.namespace, schedule_id=schedule_id
        )
        return Unary("schedules", "TriggerSchedule", request, lambda answer: answer.task)

    def backfill_schedule(
        self, schedule_id: str, start: datetime, end: datetime, dry_run: bool = False
    ) -> Unary[Backfilled]:
        request = schedules_pb2.BackfillScheduleRequest(
            namespace=self.namespace, schedule_id=schedule_id, dry_run=dry_run
        )
        time_range(request, start, end)

        def unwrap(answer: Any) -> Backfilled:
            return Backfilled(answer.created, answer.existing, list(answer.occurrences))

        return Unary("schedules", "BackfillSchedule", request, unwrap)

    def preview_schedule(
        self,
        target: str | Recurrence | schedules_pb2.ScheduleSpec,
        after: datetime | None,
        until: datetime | None,
        count: int,
    ) -> Unary[list[schedules_pb2.PreviewedOccurrence]]:
        request = schedules_pb2.PreviewScheduleRequest(count=count)
        if isinstance(target, schedules_pb2.ScheduleSpec):
            request.spec.CopyFrom(target)
        elif isinstance(target, Recurrence):
            request.spec.CopyFrom(spec_message(target))
        else:
            request.schedule.CopyFrom(
                schedules_pb2.GetScheduleRequest(namespace=self.namespace, schedule_id=target)
            )
        if after is not None:
            request.after_time.CopyFrom(timestamp(after, "after"))
        if until is not None:
            request.until_time.CopyFrom(timestamp(until, "until"))
        return Unary("schedules", "PreviewSchedule", request, lambda a: list(a.occurrences))

    def list_schedule_occurrences(
        self,
        schedule_id: str,
        start: datetime | None,
        end: datetime | None,
        outcome: str | int | None,
        size: int,
    ) -> Paged[history_pb2.ScheduleOccurrence]:
        request = history_pb2.ListScheduleOccurrencesRequest(
            namespace=self.namespace, schedule_id=schedule_id, page_size=size,
            outcome=enum_name(history_pb2.OccurrenceOutcome, "OCCURRENCE_OUTCOME_", outcome),
        )  # fmt: skip
        time_range(request, start, end)
        return Paged("history", "ListScheduleOccurrences", request, lambda page: page.occurrences)

    def get_namespace_quotas(self) -> Unary[admin_pb2.NamespaceQuotasResponse]:
        request = admin_pb2.GetNamespaceQuotasRequest(namespace=self.namespace)
        return Unary("admin", "GetNamespaceQuotas", request)

    def recount_namespace_usage(self) -> Unary[admin_pb2.NamespaceQuotasResponse]:
        request = admin_pb2.RecountNamespaceUsageRequest(namespace=self.namespace)
        return Unary("admin", "RecountNamespaceUsage", request)

    def set_namespace_quotas(
        self, quotas: Mapping[str, int | None]
    ) -> Unary[admin_pb2.NamespaceQuotasResponse]:
        """Replace the namespace's quotas with ``quotas`` (name → value; None or absent
        clears that quota)."""
        given = {name: value for name, value in quotas.items() if value is not None}
        request = admin_pb2.SetNamespaceQuotasRequest(
            namespace=self.namespace, quotas=admin_pb2.Quotas(**given)
        )
        return Unary("admin", "SetNamespaceQuotas", request)
