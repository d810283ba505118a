"""``AsyncClient``: the asyncio client, over one ``grpc.aio`` channel. Each method does what
the ``Client`` method of the same name documents."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import grpc

from tikk.client.bulk_import import (
    IMPORT_WINDOW,
    AsyncFeed,
    ImportItem,
    ImportLedger,
    check_import_options,
)
from tikk.client.calls import Calls, Paged, Unary, stubs
from tikk.client.errors import error_from_rpc
from tikk.client.listings import AsyncListing
from tikk.client.results import Backfilled, ImportResult, TaskCreated
from tikk.client.retries import (
    DEFAULT_CALL_RETRIES,
    NO_CALL_RETRIES,
    CallRetries,
    safe_to_repeat,
)
from tikk.client.server_list import ServerList
from tikk.client.specs import Recurrence, ScheduleDefinition, TaskSelection, TaskSpec
from tikk.client.transport import Transport, TransportError, dial_aio
from tikk.v1 import admin_pb2, bulk_pb2, history_pb2, schedules_pb2, tasks_pb2

R = TypeVar("R")
T = TypeVar("T")


class AsyncClient:
    """An asyncio client of tikk (one server or several), in one namespace, over one
    channel; the options are those of ``Client``, and ``retry`` repeats the same calls as
    there (waiting with ``CallRetries.async_sleep``). Create it inside the event loop that
    uses it. Listings and imports are async iterators: ``async for task in
    client.list_tasks("q")``; a listing's ``await listing.page(token)`` fetches one page."""

    def __init__(
        self,
        target: str,
        *,
        namespace: str = "",
        credentials: grpc.ChannelCredentials | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        timeout: float | None = 30.0,
        options: Sequence[tuple[str, Any]] = (),
        transport: Transport | None = None,
        retry: CallRetries | None = DEFAULT_CALL_RETRIES,
    ) -> None:
        if transport is not None and credentials is not None:
            raise TransportError("give a transport or channel credentials, not both")
        self._target = target
        self._metadata, self._timeout = tuple(metadata), timeout
        self._retry = NO_CALL_RETRIES if retry is None else retry
        if transport is None:
            self._channel = dial_aio(ServerList.parse(target), credentials, options)
        else:
            self._channel = transport.aio_channel(target, options)
        self._stubs = stubs(self._channel)
        self._calls = Calls(namespace)

    def __repr__(self) -> str:
        return f"AsyncClient(target={self._target!r}, namespace={self._calls.namespace!r})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; calls in progress are cancelled. Idempotent."""
        await self._channel.close(grace=None)

    # Tasks

    async def create_task(self, task: TaskSpec | tasks_pb2.CreateTaskRequest) -> TaskCreated:
        return await self._unary(self._calls.create_task(task))

    async def get_task(self, task_id: str) -> tasks_pb2.Task:
        return await self._unary(self._calls.get_task(task_id))

    async def reschedule_task(
        self,
        task_id: str,
        *,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        payload: object | None = None,
    ) -> tasks_pb2.Task:
        call = self._calls.reschedule_task(task_id, run_at, delay, payload)
        return await self._unary(call)

    async def cancel_task(self, task_id: str, *, stop_running: bool = False) -> tasks_pb2.Task:
        return await self._unary(self._calls.cancel_task(task_id, stop_running))

    def list_tasks(
        self,
        queue: str = "",
        *,
        state: str | int | None = None,
        labels: str = "",
        page_size: int = 100,
    ) -> AsyncListing[tasks_pb2.Task]:
        return self._paged(self._calls.list_tasks(queue, state, page_size, labels))

    def import_tasks(
        self,
        items: Iterable[ImportItem] | AsyncIterable[ImportItem],
        *,
        batch_size: int = 1_000,
        window: int = IMPORT_WINDOW,
        first_index: int = 0,
    ) -> AsyncGenerator[ImportResult, None]:
        """As ``Client.import_tasks``; ``items`` may also be an async iterable."""
        check_import_options(batch_size, window)
        ledger = ImportLedger(first_index)
        feed = AsyncFeed(ledger, items, self._calls.namespace, batch_size, window)
        return self._import(ledger, feed)

    async def _import(
        self, ledger: ImportLedger, feed: AsyncFeed
    ) -> AsyncGenerator[ImportResult, None]:
        answers = self._stubs["tasks"].ImportTasks(feed.requests(), metadata=self._metadata)
        try:
            async for answer in answers:
                feed.answered()
                for result in ledger.results(answer):
                    yield result
        except grpc.RpcError as exc:
            raise ledger.interrupted(error_from_rpc(exc)) from exc
        finally:
            feed.stop()
            answers.cancel()
        if feed.input_error is not None:
            raise feed.input_error

    def list_queues(self, *, page_size: int = 100) -> AsyncListing[tasks_pb2.QueueInfo]:
        return self._paged(self._calls.list_queues(page_size))

    async def update_queue(
        self,
        name: str,
        *,
        paused: bool | None = None,
        max_per_second: float | None = None,
        skip_older_than: timedelta | None = None,
    ) -> tasks_pb2.QueueInfo:
        call = self._calls.update_queue(name, paused, max_per_second, skip_older_than)
        return await self._unary(call)

    async def pause_queue(self, name: str) -> tasks_pb2.QueueInfo:
        return await self.update_queue(name, paused=True)

    async def resume_queue(self, name: str) -> tasks_pb2.QueueInfo:
        return await self.update_queue(name, paused=False)

    # Run history and dead letters

    async def get_run(self, run_id: str) -> history_pb2.Run:
        return await self._unary(self._calls.get_run(run_id))

    def list_task_runs(
        self, task_id: str, *, page_size: int = 100
    ) -> AsyncListing[history_pb2.Run]:
        return self._paged(self._calls.list_task_runs(task_id, page_size))

    def list_runs(
        self,
        queue: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        status: str | int | None = None,
        page_size: int = 100,
    ) -> AsyncListing[history_pb2.Run]:
        return self._paged(self._calls.list_runs(queue, start, end, status, page_size))

    def list_dead_letters(
        self, *, queue: str = "", page_size: int = 100
    ) -> AsyncListing[tasks_pb2.Task]:
        return self._paged(self._calls.list_dead_letters(queue, page_size))

    async def redrive_task(self, task_id: str) -> tasks_pb2.Task:
        return await self._unary(self._calls.redrive_task(task_id))

    async def purge_dead_letter(self, task_id: str) -> tasks_pb2.Task:
        return await self._unary(self._calls.purge_dead_letter(task_id))

    # Many tasks at once (``Client`` says what each does)

    async def count_tasks(self, selection: TaskSelection) -> bulk_pb2.CountTasksResponse:
        return await self._unary(self._calls.count_tasks(selection))

    async def bulk_cancel(
        self, selection: TaskSelection, *, dry_run: bool = False, action_id: str = ""
    ) -> bulk_pb2.BulkAction:
        return await self._unary(self._calls.bulk("BulkCancelTasks", selection, dry_run, action_id))

    async def bulk_redrive(
        self, selection: TaskSelection, *, dry_run: bool = False, action_id: str = ""
    ) -> bulk_pb2.BulkAction:
        call = self._calls.bulk("BulkRedriveTasks", selection, dry_run, action_id)
        return await self._unary(call)

    async def bulk_purge(
        self, selection: TaskSelection, *, dry_run: bool = False, action_id: str = ""
    ) -> bulk_pb2.BulkAction:
        return await self._unary(self._calls.bulk("BulkPurgeTasks", selection, dry_run, action_id))

    async def recount_usage(self, *, action_id: str = "") -> bulk_pb2.BulkAction:
        return await self._unary(self._calls.recount_usage(action_id))

    async def get_bulk_action(self, action_id: str) -> bulk_pb2.BulkAction:
        return await self._unary(self._calls.get_bulk_action(action_id))

    async def stop_bulk_action(self, action_id: str) -> bulk_pb2.BulkAction:
        return await self._unary(self._calls.stop_bulk_action(action_id))

    def list_bulk_actions(self, *, page_size: int = 100) -> AsyncListing[bulk_pb2.BulkAction]:
        return self._paged(self._calls.list_bulk_actions(page_size))

    # Schedules

    async def create_schedule(self, definition: ScheduleDefinition) -> schedules_pb2.Schedule:
        return await self._unary(self._calls.create_schedule(definition))

    async def get_schedule(self, schedule_id: str) -> schedules_pb2.Schedule:
        return await self._unary(self._calls.get_schedule(schedule_id))

    def list_schedules(self, *, page_size: int = 100) -> AsyncListing[schedules_pb2.Schedule]:
        return self._paged(self._calls.list_schedules(page_size))

    async def update_schedule(
        self,
        definition: ScheduleDefinition | schedules_pb2.Schedule,
        *,
        expected_version: str = "",
    ) -> schedules_pb2.Schedule:
        return await self._unary(self._calls.update_schedule(definition, expected_version))

    async def delete_schedule(self, schedule_id: str, *, expected_version: str = "") -> None:
        await self._unary(self._calls.delete_schedule(schedule_id, expected_version))

    async def pause_schedule(self, schedule_id: str, *, note: str = "") -> schedules_pb2.Schedule:
        return await self._unary(self._calls.pause_schedule(schedule_id, note))

    async def resume_schedule(self, schedule_id: str) -> schedules_pb2.Schedule:
        return await self._unary(self._calls.resume_schedule(schedule_id))

    async def trigger_schedule(self, schedule_id: str) -> tasks_pb2.Task:
        return await self._unary(self._calls.trigger_schedule(schedule_id))

    async def backfill_schedule(
        self, schedule_id: str, start: datetime, end: datetime, *, dry_run: bool = False
    ) -> Backfilled:
        call = self._calls.backfill_schedule(schedule_id, start, end, dry_run)
        return await self._unary(call)

    async def preview_schedule(
        self,
        target: str | Recurrence | schedules_pb2.ScheduleSpec,
        *,
        after: datetime | None = None,
        until: datetime | None = None,
        count: int = 10,
    ) -> list[schedules_pb2.PreviewedOccurrence]:
        return await self._unary(self._calls.preview_schedule(target, after, until, count))

    def list_schedule_occurrences(
        self,
        schedule_id: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        outcome: str | int | None = None,
        page_size: int = 100,
    ) -> AsyncListing[history_pb2.ScheduleOccurrence]:
        call = self._calls.list_schedule_occurrences(schedule_id, start, end, outcome, page_size)
        return self._paged(call)

    # Transport

    # Administration (needs the admin role where the server checks credentials)

    async def get_namespace_quotas(self) -> admin_pb2.NamespaceQuotasResponse:
        """The namespace's quotas (its own and those in force) and its usage."""
        return await self._unary(self._calls.get_namespace_quotas())

    async def recount_namespace_usage(self) -> admin_pb2.NamespaceQuotasResponse:
        """Correct the namespace's usage to a count of its stored unfinished tasks (a
        repair: reads every task of the namespace)."""
        return await self._unary(self._calls.recount_namespace_usage())

    async def set_namespace_quotas(
        self,
        *,
        tasks_per_second: int | None = None,
        tasks_stored: int | None = None,
        schedules: int | None = None,
        import_streams: int | None = None,
        task_retention_seconds: int | None = None,
        history_retention_seconds: int | None = None,
    ) -> admin_pb2.NamespaceQuotasResponse:
        """Replace the namespace's quotas and retention: one not given is cleared (no
        quota, or the server's default). Applies on every server process within seconds."""
        quotas = {
            "tasks_per_second": tasks_per_second, "tasks_stored": tasks_stored,
            "schedules": schedules, "import_streams": import_streams,
            "task_retention_seconds": task_retention_seconds,
            "history_retention_seconds": history_retention_seconds,
        }  # fmt: skip
        return await self._unary(self._calls.set_namespace_quotas(quotas))

    async def _unary(self, call: Unary[R]) -> R:
        method = getattr(self._stubs[call.service], call.method)

        async def send(seconds_left: float | None) -> Any:
            return await method(call.request, timeout=seconds_left, metadata=self._metadata)

        policy = self._retry if safe_to_repeat(call.method, call.request) else NO_CALL_RETRIES
        try:
            answer = await policy.run_async(send, self._timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from exc
        return call.unwrap(answer)

    def _paged(self, call: Paged[T]) -> AsyncListing[T]:
        return AsyncListing(lambda token: self._unary(call.page(token)))
