"""What a worker's result does, independent of gRPC: ``ResultRecorder``.

Every result first shows its delivery token (``tikk.delivery_tokens``): a worker can report
only deliveries a dispatcher published. Then, by kind:

- **started** (an attempt with a start timeout): the store's single claim per attempt answers
  whether the worker may run it; past the deadline the attempt is expired first
  (``server.ops.start_timeouts``), so a worker that got there late runs nothing.
- **succeeded**: successes arriving while earlier ones are written go together
  (``server.ops.coalescing``): per task one conditional write and no read, since the delivery
  names the attempt, then their history rows in one write. The state goes first, so a refused
  success leaves no run behind; a crash in between is healed by the worker's repeat.
- **failed**: the run is appended to the history, then the task is retried with exponential
  backoff and jitter, scheduled durably through the task store, until its last attempt; then,
  or on a non-retryable failure, it is dead-lettered (and a copy goes to the queue's
  dead-letter stream). This is the one place that decides retries.

Only the current attempt of a dispatched task takes a result (``server.ops.refusals``). A
result for a task that is not dispatched, or for an attempt it has moved past, is refused and
changes nothing, unless it repeats a result already recorded (a worker reporting again after a
lost acknowledgement: its run id is in the history) or reports another run of the attempt the
task records as succeeded (a duplicate delivery): those are acknowledged as before. Refusals,
of a token or of an attempt, are logged without token or payload and counted
(``tikk.results.refused`` by reason).
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from history.run_history import RunHistory
from server.ops.coalescing import Coalescer
from server.ops.late_writes import LateWriteGuard
from server.ops.refusals import (
    ResultRefused,
    StartTooLate,
    dispatched_at,
    refuse_unless_dispatched,
    same_attempt,
)
from tikk.backoff import retry_delay_ms
from tikk.clock import Clock
from tikk.delivery_tokens import DeliveryKeys, TokenRefused
from tikk.errors import NotFound
from tikk.model import (
    DeadLetter,
    Delivery,
    DueEntry,
    ResultKind,
    RetryAt,
    RunReport,
    RunStatus,
    Task,
    TaskState,
    Transition,
)
from tikk.ready_queue import ReadyQueue
from tikk.settings import Limits
from tikk.start_expiry import StartExpiry
from tikk.store.tasks import TaskStore
from tikk.telemetry import Telemetry

log = logging.getLogger("tikk.server")


class ScheduleOutcomes(Protocol):
    async def occurrence_finished(
        self, namespace: str, schedule_id: str, task_id: str, state: TaskState
    ) -> None:
        """A schedule's occurrence task reached an end state (success or dead letter)."""
        ...


@dataclass
class _PendingSuccess:
    """A success waiting in the coalescer, and its refusal once its batch was written."""

    report: RunReport
    refused: ResultRefused | None = None


class ResultRecorder:
    """Records run results (see the module); ``record`` is the one entry point."""

    def __init__(
        self,
        store: TaskStore,
        history: RunHistory,
        queue: ReadyQueue,
        clock: Clock,
        *,
        guard: LateWriteGuard,
        expiry: StartExpiry,
        keys: DeliveryKeys,
        limits: Limits,
        rng: random.Random | None = None,
        telemetry: Telemetry | None = None,
        schedules: ScheduleOutcomes | None = None,
    ) -> None:
        self._store = store
        self._history = history
        self._queue = queue
        self._clock = clock
        self._guard = guard
        self._keys = keys
        self._limits = limits
        self._rng = rng or random.Random()
        self._telemetry = telemetry or Telemetry()
        self._schedules = schedules
        self._expiry = expiry
        # Successes of every stream are written together.
        self._successes = Coalescer(self._write_successes)

    async def record(self, report: RunReport) -> None:
        """Record ``report`` (see the module). Safe to repeat: the history keeps one record per
        run id, and a repeated or stale report leaves the task alone. Raises ``TokenRefused``
        or ``ResultRefused`` (logged and counted), ``StartTooLate`` for a start claim that
        lost to the attempt's expiry, ``BackendUnavailable``."""
        try:
            self._keys.verify(report.delivery)
            if report.kind is ResultKind.STARTED:
                await self._claim_start(report)
            elif report.kind is ResultKind.SUCCEEDED:
                await self._record_success(report)
            else:
                await self._record_failure(report)
        except (TokenRefused, ResultRefused) as exc:
            self._refused(report, exc)
            raise

    def _refused(self, report: RunReport, exc: TokenRefused | ResultRefused) -> None:
        """A log line (its message names no token or payload) and a count."""
        e = report.entry
        log.warning(
            "result %s refused (%s): namespace %r task %r queue %r attempt %d: %s",
            report.run_id, exc.reason, e.namespace, e.task_id, e.queue, e.attempt, exc,
        )  # fmt: skip
        self._telemetry.result_refused(exc.reason)

    async def _claim_start(self, report: RunReport) -> None:
        """May the worker run this attempt (which has a start timeout)? Raises
        ``StartTooLate`` if not."""
        e = report.entry
        task = await self._current(e)
        # An attempt dead-lettered by its start timeout is answered by the claim below.
        if not (task.state is TaskState.DEAD_LETTERED and same_attempt(task, e)):
            refuse_unless_dispatched(task, e)
        now = self._clock.now_ms()
        if e.start_timeout_ms and now >= e.due_ms + e.start_timeout_ms:
            await self._expiry.expire(e, now)
        if not await self._store.claim_start(e, now):
            raise StartTooLate()

    async def _record_failure(self, report: RunReport) -> None:
        """Append the failed run to the history, then retry or dead-letter the task."""
        now = self._clock.now_ms()
        e = report.entry
        task = await self._current(e)
        if not dispatched_at(task, e) and not await self._recorded(report):
            await self._refuse(task, e, now)
        status, transition = self._decide(report, task, now)
        await self._history.append(report.record(status))
        if isinstance(transition, DeadLetter):
            # Before the task moves: if this fails the worker reports again, and the copy is
            # published then (at least once).
            delivery = Delivery(e, report.fired_ms)
            await self._queue.publish_dead_letter(delivery, report.error_type, report.error_message)
        await self._finish(e, transition, now)
        if isinstance(transition, RetryAt):
            self._telemetry.retried(e.queue)
        elif isinstance(transition, DeadLetter):
            self._telemetry.dead_lettered(e.queue)

    async def _finish(self, e: DueEntry, transition: Transition, now: int) -> None:
        """Move the task on from attempt ``e``; nothing if the report was a repeat."""
        # A task removed meanwhile (its store was reset) still leaves its run on record.
        with contextlib.suppress(NotFound):
            async with self._guard.watching([(e.namespace, e.task_id)]):
                task = await self._store.finish_attempt(
                    e.namespace, e.task_id, e.attempt, transition, now
                )
            if task is None:
                # A repeated report: if the first one's retry landed late, it is moved now.
                await self._guard.confirm([await self._store.get(e.namespace, e.task_id)])
            elif task.state is TaskState.SCHEDULED:
                await self._guard.confirm([task])
            if task is not None:
                await self._occurrence_finished(e, task.state)

    async def _record_success(self, report: RunReport) -> None:
        pending = _PendingSuccess(report)
        await self._successes.submit(pending)
        if pending.refused is not None:
            raise pending.refused

    async def _write_successes(self, batch: Sequence[_PendingSuccess]) -> None:
        """One conditional write per task, with no read (a success needs none), then one
        history write for the lot; each report's refusal is left on its entry."""
        reports = [p.report for p in batch]
        now = self._clock.now_ms()
        moved = await self._store.succeed_many([r.entry for r in reports], now)
        for pending, done in zip(batch, moved, strict=True):
            pending.refused = None if done else await self._refusal(pending.report, now)
        kept = [p.report for p in batch if p.refused is None]
        await self._history.append_many([r.record(RunStatus.SUCCEEDED) for r in kept])
        for report, done in zip(reports, moved, strict=True):
            if done:
                await self._occurrence_finished(report.entry, TaskState.SUCCEEDED)

    async def _refusal(self, report: RunReport, now: int) -> ResultRefused | None:
        """Why a success the store did not apply is refused; None for a repeat or another run
        of the attempt that succeeded. A repeat also moves a retry the first report placed
        late (see ``server.ops.late_writes``)."""
        e = report.entry
        try:
            task = await self._current(e)
            succeeded = task.state is TaskState.SUCCEEDED and same_attempt(task, e)
            if not succeeded and not await self._recorded(report):
                await self._refuse(task, e, now)
        except ResultRefused as exc:
            return exc
        await self._guard.confirm([task])
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
        elif task.state is TaskState.DEAD_LETTERED and same_attempt(task, e):
            applied = DeadLetter(*error)
        if applied is not None:
            # Already applied by that report; only its other rows are written again
            # (``TaskStore.finish_attempt`` on a task that has moved on).
            await self._finish(e, applied, now)
        refuse_unless_dispatched(task, e)

    async def _current(self, e: DueEntry) -> Task:
        """The task a result is for; ``ResultRefused`` if there is none."""
        try:
            return await self._store.get(e.namespace, e.task_id)
        except NotFound:
            raise ResultRefused("not_dispatched", f"task {e.task_id!r} does not exist") from None

    async def _recorded(self, report: RunReport) -> bool:
        """Is this report's run already in the history (a repeat after a lost answer)?"""
        try:
            run = await self._history.get(report.entry.namespace, report.run_id)
        except NotFound:
            return False
        return (run.task_id, run.attempt) == (report.entry.task_id, report.entry.attempt)

    async def _occurrence_finished(self, e: DueEntry, state: TaskState) -> None:
        if e.schedule_id and self._schedules is not None:
            await self._schedules.occurrence_finished(e.namespace, e.schedule_id, e.task_id, state)

    def _decide(self, report: RunReport, task: Task, now: int) -> tuple[RunStatus, Transition]:
        """What a failed run does: a retry at its backoff, or a dead letter."""
        etype, emsg = report.error_type, report.error_message
        dead = (RunStatus.DEAD_LETTERED, DeadLetter(etype, emsg))
        if report.kind is ResultKind.FAILED_PERMANENTLY:
            return dead
        if report.entry.attempt >= task.retry.max_attempts:
            return dead
        if report.kind is ResultKind.RETRY and report.retry_after_ms is not None:
            delay = min(report.retry_after_ms, self._limits.max_backoff_ms)
        else:
            delay = retry_delay_ms(task.retry, report.entry.attempt, self._rng)
        due = self._guard.place_due(task.shard, now + delay)
        return RunStatus.FAILED, RetryAt(due, etype, emsg)
