"""What the server does with tasks and run results, independent of gRPC.

The one place that decides retries: a failed run is retried with exponential backoff and
jitter, scheduled durably through the task store, until the task's last attempt; then, or on
a non-retryable failure, the task is dead-lettered (and a copy goes to the queue's dead-letter
stream).

Only the current attempt of a dispatched task takes a result. A result for a task that is not
dispatched, or for an attempt it has moved past, is refused (``ResultRefused``) and changes
nothing, unless it repeats a result already recorded (a worker reporting again after a lost
acknowledgement: its run id is in the history) or reports another run of the attempt the task
records as succeeded (a duplicate delivery): those are acknowledged as before.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Sequence
from typing import Protocol

from dispatcher.start_timeouts import StartExpiry
from history.run_history import RunHistory
from server.late_writes import LateWriteGuard
from tikk.backoff import retry_delay_ms
from tikk.buckets import shard_of
from tikk.clock import Clock
from tikk.errors import FailedPrecondition, NotFound, TikkError
from tikk.model import (
    DeadLetter,
    Delivery,
    DueEntry,
    ResultKind,
    RetryAt,
    RunRecord,
    RunReport,
    RunStatus,
    Succeed,
    Task,
    TaskState,
    Transition,
)
from tikk.ready_queue import ReadyQueue
from tikk.settings import Limits
from tikk.store.tasks import TaskStore
from tikk.telemetry import Telemetry


class ResultRefused(FailedPrecondition):
    """A result for a task that is not dispatched at the reported attempt. ``reason``:
    ``not_dispatched`` (the task is not running that attempt: not yet dispatched, cancelled,
    finished, or gone) or ``stale_attempt`` (the task has moved on to another attempt)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ScheduleOutcomes(Protocol):
    async def occurrence_finished(
        self, namespace: str, schedule_id: str, task_id: str, state: TaskState
    ) -> None:
        """A schedule's occurrence task reached an end state (success or dead letter)."""
        ...


class Lifecycle:
    def __init__(
        self,
        store: TaskStore,
        history: RunHistory,
        queue: ReadyQueue,
        clock: Clock,
        *,
        limits: Limits,
        rng: random.Random | None = None,
        telemetry: Telemetry | None = None,
        schedules: ScheduleOutcomes | None = None,
        late_write_grace_ms: int = 5_000,
    ) -> None:
        self.store = store
        self.history = history
        self.queue = queue
        self.clock = clock
        self.limits = limits
        self._rng = rng or random.Random()
        self._telemetry = telemetry or Telemetry()
        self._schedules = schedules
        self.expiry = StartExpiry(store, history, queue, self._telemetry)
        # Every due row this server writes goes through the guard (see server.late_writes).
        self.guard = LateWriteGuard(
            store, clock, grace_ms=late_write_grace_ms, telemetry=self._telemetry
        )

    async def create(self, task: Task) -> tuple[Task, bool]:
        placed = self.guard.place(task)
        async with self.guard.watching([(placed.namespace, placed.task_id)]):
            stored, created = await self.store.create(placed)
        [stored] = await self.guard.confirm([stored])
        return stored, created

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        placed = [self.guard.place(t) for t in tasks]
        async with self.guard.watching((t.namespace, t.task_id) for t in placed):
            outcomes = await self.store.create_many(placed, new_ids=new_ids)
        written = [o[0] for o in outcomes if not isinstance(o, TikkError)]
        confirmed = iter(await self.guard.confirm(written))
        return [o if isinstance(o, TikkError) else (next(confirmed), o[1]) for o in outcomes]

    async def cancel(self, namespace: str, task_id: str) -> Task:
        return await self.store.cancel(namespace, task_id, self.clock.now_ms())

    async def redrive(self, namespace: str, task_id: str) -> Task:
        shard = shard_of(namespace, task_id, self.store.shard_count)
        due = self.guard.place_due(shard, self.clock.now_ms())
        async with self.guard.watching([(namespace, task_id)]):
            redriven = await self.store.redrive(namespace, task_id, due)
        [task] = await self.guard.confirm([redriven])
        return task

    async def claim_start(self, report: RunReport) -> bool:
        """May the worker run this attempt (which has a start timeout)? Past the deadline the
        attempt is expired first, so a worker that got there late runs nothing; either way the
        store's single claim per attempt answers (see ``dispatcher.start_timeouts``)."""
        e = report.entry
        task = await self._current(e)
        # An attempt dead-lettered by its start timeout is answered by the claim below.
        if not (task.state is TaskState.DEAD_LETTERED and _same_attempt(task, e)):
            _refuse_unless_dispatched(task, e)
        now = self.clock.now_ms()
        if e.start_timeout_ms and now >= e.due_ms + e.start_timeout_ms:
            await self.expiry.expire(e, now)
        return await self.store.claim_start(e, now)

    async def record_result(self, report: RunReport) -> RunRecord:
        """Append the run to the history, then move the task on (success, retry or dead
        letter). Safe to repeat: the history keeps one record per run id, and a repeated or
        stale report leaves the task alone. Raises ``ResultRefused`` (see the module)."""
        if report.kind is ResultKind.SUCCEEDED:
            [refused] = await self.record_successes([report])
            if refused is not None:
                raise refused
            return _run_record(report, RunStatus.SUCCEEDED)
        now = self.clock.now_ms()
        e = report.entry
        task = await self._current(e)
        if not _dispatched_at(task, e) and not await self._recorded(report):
            await self._refuse(task, e, now)
        status, transition = self._decide(report, task, now)
        record = _run_record(report, status)
        await self.history.append(record)
        if isinstance(transition, DeadLetter):
            # Before the task moves: if this fails the worker reports again, and the copy is
            # published then (at least once).
            delivery = Delivery(e, report.fired_ms)
            await self.queue.publish_dead_letter(delivery, report.error_type, report.error_message)
        await self._finish(e, transition, now)
        if isinstance(transition, RetryAt):
            self._telemetry.retried(e.queue)
        elif isinstance(transition, DeadLetter):
            self._telemetry.dead_lettered(e.queue)
        return record

    async def _finish(self, e: DueEntry, transition: Transition, now: int) -> None:
        """Move the task on from attempt ``e``; nothing if the report was a repeat."""
        # A task removed meanwhile (its store was reset) still leaves its run on record.
        with contextlib.suppress(NotFound):
            async with self.guard.watching([(e.namespace, e.task_id)]):
                task = await self.store.finish_attempt(
                    e.namespace, e.task_id, e.attempt, transition, now
                )
            if task is None:
                # A repeated report: if the first one's retry landed late, it is moved now.
                await self.guard.confirm([await self.store.get(e.namespace, e.task_id)])
            elif task.state is TaskState.SCHEDULED:
                await self.guard.confirm([task])
            if task is not None:
                await self._occurrence_finished(e, task.state)

    async def record_successes(self, reports: Sequence[RunReport]) -> list[ResultRefused | None]:
        """``record_result`` for successful runs, many at once: one conditional write per
        task, with no read (a success needs none), then one history write for the lot; each
        report's refusal, or None if it was recorded. The state goes first so that a refused
        report leaves no run behind; a crash in between is healed by the worker's repeat (the
        task reads as succeeded at that attempt, and the run is appended then)."""
        now = self.clock.now_ms()
        moved = await self.store.succeed_many([r.entry for r in reports], now)
        refusals = [
            None if done else await self._refusal(r, now)
            for r, done in zip(reports, moved, strict=True)
        ]
        kept = [r for r, refused in zip(reports, refusals, strict=True) if refused is None]
        await self.history.append_many([_run_record(r, RunStatus.SUCCEEDED) for r in kept])
        for report, done in zip(reports, moved, strict=True):
            if done:
                await self._occurrence_finished(report.entry, TaskState.SUCCEEDED)
        return refusals

    async def _refusal(self, report: RunReport, now: int) -> ResultRefused | None:
        """Why a success the store did not apply is refused; None for a repeat or another run
        of the attempt that succeeded. A repeat also moves a retry the first report placed
        late (see ``server.late_writes``)."""
        e = report.entry
        try:
            task = await self._current(e)
            succeeded = task.state is TaskState.SUCCEEDED and _same_attempt(task, e)
            if not succeeded and not await self._recorded(report):
                await self._refuse(task, e, now)
        except ResultRefused as exc:
            return exc
        await self.guard.confirm([task])
        return None

    async def _refuse(self, task: Task, e: DueEntry, now: int) -> None:
        """Raise ``ResultRefused`` unless ``task`` is running attempt ``e``.

        A refused run of the attempt whose report moved the task on (to its retry, or to the
        dead letters) is an authentic delivery run again: the worker that ran it first died
        before its report was acknowledged. The server that recorded that report may have
        died too, before the retry's due row or the dead-letter listing, and no repeat of it
        will come. So that move is completed once more (idempotent) before the refusal, or
        the retry might never fire."""
        error = (task.last_error_type, task.last_error_message)
        applied: Transition | None = None
        if task.state is TaskState.SCHEDULED and task.attempt == e.attempt + 1:
            applied = RetryAt(task.due_ms, *error)
        elif task.state is TaskState.DEAD_LETTERED and _same_attempt(task, e):
            applied = DeadLetter(*error)
        if applied is not None:
            # Already applied by that report; only its other rows are written again
            # (``TaskStore.finish_attempt`` on a task that has moved on).
            await self._finish(e, applied, now)
        _refuse_unless_dispatched(task, e)

    async def _current(self, e: DueEntry) -> Task:
        """The task a result is for; ``ResultRefused`` if there is none."""
        try:
            return await self.store.get(e.namespace, e.task_id)
        except NotFound:
            raise ResultRefused("not_dispatched", f"task {e.task_id!r} does not exist") from None

    async def _recorded(self, report: RunReport) -> bool:
        """Is this report's run already in the history (a repeat after a lost answer)?"""
        try:
            run = await self.history.get(report.entry.namespace, report.run_id)
        except NotFound:
            return False
        return (run.task_id, run.attempt) == (report.entry.task_id, report.entry.attempt)

    async def _occurrence_finished(self, e: DueEntry, state: TaskState) -> None:
        if e.schedule_id and self._schedules is not None:
            await self._schedules.occurrence_finished(e.namespace, e.schedule_id, e.task_id, state)

    def _decide(self, report: RunReport, task: Task, now: int) -> tuple[RunStatus, Transition]:
        if report.kind is ResultKind.SUCCEEDED:
            return RunStatus.SUCCEEDED, Succeed()
        etype, emsg = report.error_type, report.error_message
        dead = (RunStatus.DEAD_LETTERED, DeadLetter(etype, emsg))
        if report.kind is ResultKind.FAILED_PERMANENTLY:
            return dead
        if report.entry.attempt >= task.retry.max_attempts:
            return dead
        if report.kind is ResultKind.RETRY and report.retry_after_ms is not None:
            delay = min(report.retry_after_ms, self.limits.max_backoff_ms)
        else:
            delay = retry_delay_ms(task.retry, report.entry.attempt, self._rng)
        due = self.guard.place_due(task.shard, now + delay)
        return RunStatus.FAILED, RetryAt(due, etype, emsg)


def _same_attempt(task: Task, e: DueEntry) -> bool:
    # The due time tells occurrences apart: a redriven task counts attempts from 1 again.
    return (task.attempt, task.due_ms) == (e.attempt, e.due_ms)


def _dispatched_at(task: Task, e: DueEntry) -> bool:
    return task.state is TaskState.DISPATCHED and _same_attempt(task, e)


def _refuse_unless_dispatched(task: Task, e: DueEntry) -> None:
    """Raise ``ResultRefused`` unless ``task`` is running the attempt ``e``."""
    if not _same_attempt(task, e):
        # The due time tells a moved or re-driven occurrence from the one delivered.
        raise ResultRefused(
            "stale_attempt",
            f"attempt {e.attempt} due at {e.due_ms} of task {e.task_id!r} is not its current "
            f"attempt ({task.attempt} due at {task.due_ms}, {task.state.name})",
        )
    if task.state is not TaskState.DISPATCHED:
        raise ResultRefused(
            "not_dispatched",
            f"task {e.task_id!r} is not dispatched at attempt {e.attempt} ({task.state.name})",
        )


def _run_record(report: RunReport, status: RunStatus) -> RunRecord:
    """The history's record of the run ``report`` tells of."""
    e = report.entry
    return RunRecord(
        namespace=e.namespace,
        run_id=report.run_id,
        task_id=e.task_id,
        queue=e.queue,
        handler=e.handler,
        attempt=e.attempt,
        status=status,
        scheduled_ms=e.scheduled_ms,
        due_ms=e.due_ms,
        fired_ms=report.fired_ms,
        started_ms=report.started_ms,
        finished_ms=report.finished_ms,
        worker_id=report.worker_id,
        error_type=report.error_type,
        error_message=report.error_message,
        output=report.output,
        idempotency_key=e.idempotency_key,
    )
