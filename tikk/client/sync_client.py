"""``Client``: the blocking client, over one gRPC channel."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import grpc

from tikk.client.bulk_import import (
    IMPORT_WINDOW,
    BlockingFeed,
    ImportItem,
    ImportLedger,
    check_import_options,
)
from tikk.client.calls import Calls, Paged, Unary, stubs
from tikk.client.errors import error_from_rpc
from tikk.client.listings import Listing
from tikk.client.results import Backfilled, ImportResult, TaskCreated
from tikk.client.retries import (
    DEFAULT_CALL_RETRIES,
    NO_CALL_RETRIES,
    CallRetries,
    safe_to_repeat,
)
from tikk.client.server_list import ServerList
from tikk.client.specs import Recurrence, ScheduleDefinition, TaskSelection, TaskSpec
from tikk.client.transport import Transport, TransportError, dial
from tikk.v1 import admin_pb2, bulk_pb2, history_pb2, schedules_pb2, tasks_pb2

R = TypeVar("R")
T = TypeVar("T")


class Client:
    """A blocking client of tikk, in one namespace, over one channel.

    ``target`` is a server's ``host:port``, or several servers, calls balanced over them
    (``tikk.client.server_list``: ``"10.0.0.1:7070,10.0.0.2:7070"`` or
    ``"dns:///tikk.internal:7070"``): a call goes to the next server whose connection is
    ready, so one that is down is skipped, and a call that was on a server when it died is
    sent again to another if ``retry`` says it is safe. ``transport`` says how to reach the
    servers: TLS, a client certificate, a bearer token
    (``tikk.client.Transport``); without it the channel is plaintext, or made secure by
    ``credentials`` (``grpc.ssl_channel_credentials(...)``). ``metadata`` is sent with every
    call; ``timeout`` (seconds) bounds each unary call and each page of a listing, not an
    import stream. ``namespace`` empty means the server's default namespace.

    ``retry`` (a ``CallRetries``; None or ``attempts=1``: off) repeats, after UNAVAILABLE
    only (a server restarting, a connection reset), the calls that are safe to repeat: every
    read (``get_*``, each page of ``list_*``, ``count_tasks``, ``preview_schedule``,
    ``get_namespace_quotas``, a bulk dry run); ``create_task`` with a ``task_id`` and
    ``create_schedule`` with a ``schedule_id``; the bulk actions and ``recount_usage`` with
    an ``action_id``; ``cancel_task``, ``stop_bulk_action``, ``update_queue`` (and
    ``pause_queue``, ``resume_queue``), ``set_namespace_quotas`` and ``backfill_schedule``.
    Every other call, and any other code, is raised at once (``tikk.client.retries`` says
    why each). The waits count against ``timeout``, which bounds the call as a whole.

    Every call raises a ``tikk.client.ClientError`` subclass when it fails. Listings
    (``Listing``) are lazy: they fetch the next page when the previous one is used up, and
    ``page(token)`` fetches one page with the token to the next. Safe to share between threads.
    """

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
            self._channel = dial(ServerList.parse(target), credentials, options)
        else:
            self._channel = transport.channel(target, options)
        self._stubs = stubs(self._channel)
        self._calls = Calls(namespace)

    def __repr__(self) -> str:
        return f"Client(target={self._target!r}, namespace={self._calls.namespace!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel; calls in progress are cancelled. Idempotent."""
        self._channel.close()

    # Tasks

    def create_task(self, task: TaskSpec | tasks_pb2.CreateTaskRequest) -> TaskCreated:
        """Create a task. With a ``task_id``, idempotent: an identical task returns
        ``created=False``, different content raises ``AlreadyExistsError``; so only then is
        it repeated after UNAVAILABLE (``created`` may then be False for the task this call
        created before its answer was lost)."""
        return self._unary(self._calls.create_task(task))

    def get_task(self, task_id: str) -> tasks_pb2.Task:
        """The task; ``NotFoundError`` if there is none."""
        return self._unary(self._calls.get_task(task_id))

    def reschedule_task(
        self,
        task_id: str,
        *,
        run_at: datetime | None = None,
        delay: timedelta | None = None,
        payload: object | None = None,
    ) -> tasks_pb2.Task:
        """Move a scheduled task to ``run_at`` (or ``delay`` from now), with a new
        ``payload`` if given; ``FailedPreconditionError`` once it was dispatched."""
        call = self._calls.reschedule_task(task_id, run_at, delay, payload)
        return self._unary(call)

    def cancel_task(self, task_id: str, *, stop_running: bool = False) -> tasks_pb2.Task:
        """Cancel a task not dispatched yet (a cancelled one stays so, which makes it safe
        to repeat after UNAVAILABLE); ``FailedPreconditionError`` once it finished, or was
        dispatched, unless ``stop_running``: then its run is stopped and recorded as
        cancelled. On Cassandra a cancel acknowledged inside the cancel fence is UNAVAILABLE
        every time it is asked, so it is raised after the last attempt."""
        return self._unary(self._calls.cancel_task(task_id, stop_running))

    def list_tasks(
        self,
        queue: str = "",
        *,
        state: str | int | None = None,
        labels: str = "",
        page_size: int = 100,
    ) -> Listing[tasks_pb2.Task]:
        """Every task of ``queue`` (in ``state``, e.g. ``"scheduled"``, when given); with
        ``labels`` (a selector, e.g. ``"customer=acme,region!=eu"``), the tasks it selects,
        of ``queue`` if one is given."""
        return self._paged(self._calls.list_tasks(queue, state, page_size, labels))

    def import_tasks(
        self,
        items: Iterable[ImportItem],
        *,
        batch_size: int = 1_000,
        window: int = IMPORT_WINDOW,
        first_index: int = 0,
    ) -> Generator[ImportResult, None, None]:
        """Create any number of tasks through one ``ImportTasks`` stream: one result per item,
        in input order, each once its batch is durable. ``items`` is read lazily, at most
        ``window`` batches ahead of the answers (at least the server's window of 4, since it
        answers once it holds that many).

        A refused item is a result with its code, not an exception. If the stream breaks,
        ``ImportInterrupted`` says how many items were answered: import the rest again from
        its ``next_index`` (pass ``first_index=next_index`` to keep the indexes); with task
        ids of your own nothing is created twice. Closing the iterator early cancels the
        stream the same way. An exception of ``items`` is raised after the items before it
        are answered.
        """
        check_import_options(batch_size, window)
        ledger = ImportLedger(first_index)
        feed = BlockingFeed(ledger, items, self._calls.namespace, batch_size, window)
        return self._import(ledger, feed)

    def _import(
        self, ledger: ImportLedger, feed: BlockingFeed
    ) -> Generator[ImportResult, None, None]:
        answers = self._stubs["tasks"].ImportTasks(feed.requests(), metadata=self._metadata)
        try:
            for answer in answers:
                feed.answered()
                yield from ledger.results(answer)
        except grpc.RpcError as exc:
            raise ledger.interrupted(error_from_rpc(exc)) from exc
        finally:
            feed.stop()
            answers.cancel()
        if feed.input_error is not None:
            raise feed.input_error

    def list_queues(self, *, page_size: int = 100) -> Listing[tasks_pb2.QueueInfo]:
        """Every ready queue the server knows of, with what waits in it (all namespaces)."""
        return self._paged(self._calls.list_queues(page_size))

    def update_queue(
        self,
        name: str,
        *,
        paused: bool | None = None,
        max_per_second: float | None = None,
        skip_older_than: timedelta | None = None,
    ) -> tasks_pb2.QueueInfo:
        """Pause (``paused=True``) or resume a queue, set its dispatch rate (0: no limit) and
        how old a held task may be when released and still run (zero: any); a setting not
        given stays. Needs admin on every namespace. Dispatchers apply it within a second."""
        call = self._calls.update_queue(name, paused, max_per_second, skip_older_than)
        return self._unary(call)

    def pause_queue(self, name: str) -> tasks_pb2.QueueInfo:
        """Hold the queue's due tasks (still scheduled) until ``resume_queue``."""
        return self.update_queue(name, paused=True)

    def resume_queue(self, name: str) -> tasks_pb2.QueueInfo:
        """Release the held tasks in due order at a bounded rate, and dispatch as before."""
        return self.update_queue(name, paused=False)

    # Run history and dead letters

    def get_run(self, run_id: str) -> history_pb2.Run:
        """One run record; ``NotFoundError`` if there is none."""
        return self._unary(self._calls.get_run(run_id))

    def list_task_runs(self, task_id: str, *, page_size: int = 100) -> Listing[history_pb2.Run]:
        """Every run of one task, newest first."""
        return self._paged(self._calls.list_task_runs(task_id, page_size))

    def list_runs(
        self,
        queue: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        status: str | int | None = None,
        page_size: int = 100,
    ) -> Listing[history_pb2.Run]:
        """Runs of ``queue`` the server recorded in [start, end) (by default the last hour), newest
        first; ``status`` (e.g. ``"failed"``) filters."""
        return self._paged(self._calls.list_runs(queue, start, end, status, page_size))

    def list_dead_letters(
        self, *, queue: str = "", page_size: int = 100
    ) -> Listing[tasks_pb2.Task]:
        """Dead-lettered tasks, of one queue or of all."""
        return self._paged(self._calls.list_dead_letters(queue, page_size))

    def redrive_task(self, task_id: str) -> tasks_pb2.Task:
        """Schedule a dead-lettered task again, now, with a fresh attempt count."""
        return self._unary(self._calls.redrive_task(task_id))

    def purge_dead_letter(self, task_id: str) -> tasks_pb2.Task:
        """Delete a dead-lettered task for good (its runs stay in the history); the task as
        it was. ``FailedPreconditionError`` unless it is dead-lettered."""
        return self._unary(self._calls.purge_dead_letter(task_id))

    # Many tasks at once

    def count_tasks(self, selection: TaskSelection) -> bulk_pb2.CountTasksResponse:
        """How many tasks ``selection`` means (``complete`` False past a million read)."""
        return self._unary(self._calls.count_tasks(selection))

    def bulk_cancel(
        self, selection: TaskSelection, *, dry_run: bool = False, action_id: str = ""
    ) -> bulk_pb2.BulkAction:
        """Cancel every scheduled task of ``selection``: with ``dry_run``, only how many and
        a sample; else a server-side action, returned at once (``get_bulk_action`` follows
        it). The same ``action_id`` again returns the same action, so only a dry run or a
        call with an ``action_id`` is repeated after UNAVAILABLE."""
        return self._unary(self._calls.bulk("BulkCancelTasks", selection, dry_run, action_id))

    def bulk_redrive(
        self, selection: TaskSelection, *, dry_run: bool = False, action_id: str = ""
    ) -> bulk_pb2.BulkAction:
        """``bulk_cancel``'s way, re-driving the dead letters of ``selection``."""
        return self._unary(self._calls.bulk("BulkRedriveTasks", selection, dry_run, action_id))

    def bulk_purge(
        self, selection: TaskSelection, *, dry_run: bool = False, action_id: str = ""
    ) -> bulk_pb2.BulkAction:
        """``bulk_cancel``'s way, purging the dead letters of ``selection``."""
        return self._unary(self._calls.bulk("BulkPurgeTasks", selection, dry_run, action_id))

    def recount_usage(self, *, action_id: str = "") -> bulk_pb2.BulkAction:
        """Repair the namespace's usage count from its stored tasks, as an action with
        progress (``get_bulk_action``); a store of millions takes minutes, not one call."""
        return self._unary(self._calls.recount_usage(action_id))

    def get_bulk_action(self, action_id: str) -> bulk_pb2.BulkAction:
        return self._unary(self._calls.get_bulk_action(action_id))

    def stop_bulk_action(self, action_id: str) -> bulk_pb2.BulkAction:
        """Stop an action after the task it is at; what it did stays done."""
        return self._unary(self._calls.stop_bulk_action(action_id))

    def list_bulk_actions(self, *, page_size: int = 100) -> Listing[bulk_pb2.BulkAction]:
        return self._paged(self._calls.list_bulk_actions(page_size))

    # Schedules

    def create_schedule(self, definition: ScheduleDefinition) -> schedules_pb2.Schedule:
        """Create a recurring schedule; its first occurrence is planned at once. With a
        ``schedule_id``, idempotent (the identical schedule is returned), and repeated after
        UNAVAILABLE."""
        return self._unary(self._calls.create_schedule(definition))

    def get_schedule(self, schedule_id: str) -> schedules_pb2.Schedule:
        return self._unary(self._calls.get_schedule(schedule_id))

    def list_schedules(self, *, page_size: int = 100) -> Listing[schedules_pb2.Schedule]:
        return self._paged(self._calls.list_schedules(page_size))

    def update_schedule(
        self,
        definition: ScheduleDefinition | schedules_pb2.Schedule,
        *,
        expected_version: str = "",
    ) -> schedules_pb2.Schedule:
        """Replace a schedule's definition (a ``ScheduleDefinition``, or the ``Schedule`` read
        and changed); with ``expected_version`` (the ``version`` read before), a schedule
        changed since raises ``ConflictError`` and nothing changes."""
        return self._unary(self._calls.update_schedule(definition, expected_version))

    def delete_schedule(self, schedule_id: str, *, expected_version: str = "") -> None:
        """Delete a schedule; tasks it already created stay."""
        self._unary(self._calls.delete_schedule(schedule_id, expected_version))

    def pause_schedule(self, schedule_id: str, *, note: str = "") -> schedules_pb2.Schedule:
        """Pause: occurrences are recorded as skipped until resumed."""
        return self._unary(self._calls.pause_schedule(schedule_id, note))

    def resume_schedule(self, schedule_id: str) -> schedules_pb2.Schedule:
        return self._unary(self._calls.resume_schedule(schedule_id))

    def trigger_schedule(self, schedule_id: str) -> tasks_pb2.Task:
        """Run one occurrence now; returns its task."""
        return self._unary(self._calls.trigger_schedule(schedule_id))

    def backfill_schedule(
        self, schedule_id: str, start: datetime, end: datetime, *, dry_run: bool = False
    ) -> Backfilled:
        """Create, to run now, every occurrence with a nominal time in [start, end);
        occurrences that already exist are counted, not created twice. ``dry_run``: create
        nothing, answer which would be."""
        return self._unary(self._calls.backfill_schedule(schedule_id, start, end, dry_run))

    def preview_schedule(
        self,
        target: str | Recurrence | schedules_pb2.ScheduleSpec,
        *,
        after: datetime | None = None,
        until: datetime | None = None,
        count: int = 10,
    ) -> list[schedules_pb2.PreviewedOccurrence]:
        """The next occurrences of a stored schedule (its id) or of a recurrence not yet
        created (or a ``ScheduleSpec``): after ``after`` (default now), at most ``count``,
        none after ``until``."""
        return self._unary(self._calls.preview_schedule(target, after, until, count))

    def list_schedule_occurrences(
        self,
        schedule_id: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        outcome: str | int | None = None,
        page_size: int = 100,
    ) -> Listing[history_pb2.ScheduleOccurrence]:
        """What became of each occurrence with a nominal time in [start, end) (by default
        the last 30 days), newest first; ``outcome`` (e.g. ``"fired"``) filters."""
        call = self._calls.list_schedule_occurrences(schedule_id, start, end, outcome, page_size)
        return self._paged(call)

    # Transport

    # Administration (needs the admin role where the server checks credentials)

    def get_namespace_quotas(self) -> admin_pb2.NamespaceQuotasResponse:
        """The namespace's quotas (its own and those in force) and its usage."""
        return self._unary(self._calls.get_namespace_quotas())

    def recount_namespace_usage(self) -> admin_pb2.NamespaceQuotasResponse:
        """Correct the namespace's usage to a count of its stored unfinished tasks (a
        repair: reads every task of the namespace)."""
        return self._unary(self._calls.recount_namespace_usage())

    def set_namespace_quotas(
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
        return self._unary(self._calls.set_namespace_quotas(quotas))

    def _unary(self, call: Unary[R]) -> R:
        method = getattr(self._stubs[call.service], call.method)

        def send(seconds_left: float | None) -> Any:
            return method(call.request, timeout=seconds_left, metadata=self._metadata)

        policy = self._retry if safe_to_repeat(call.method, call.request) else NO_CALL_RETRIES
        try:
            answer = policy.run(send, self._timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from exc
        return call.unwrap(answer)

    def _paged(self, call: Paged[T]) -> Listing[T]:
        return Listing(lambda token: self._unary(call.page(token)))
