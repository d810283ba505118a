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
- **cancelled**: the worker stopped a run whose task was cancelled while it ran
  (``TaskOps.cancel`` with ``stop_running`` of a dispatched task ends its attempt CANCELLED
  at once): recorded as a
  CANCELLED run. Whatever else a run of such an attempt reports within ``result_grace_ms`` of
  the cancel is recorded too (a success as SUCCEEDED, a failure as CANCELLED: it is not
  retried), and changes nothing of the task.

Only the current attempt of a dispatched task takes a result (``server.ops.refusals``). A
result for a task that is not dispatched, or for an attempt it has moved past, is refused and
changes nothing, unless it repeats a result already recorded (a worker reporting again after a
lost acknowledgement: its run id is in the history; acknowledged, and written again under the
time of its first recording, which adds no record) or reports another run of the attempt the
task records as succeeded (a duplicate delivery: recorded, and counted as
``tikk.results.duplicates``). Both are taken only within ``Limits.result_grace_ms`` of the end
of their attempt (``token_expired`` after), and an attempt records at most
``Limits.max_extra_runs`` further runs (``too_many_runs``), so a captured token buys little.
Refusals, of a token or of an attempt, are logged without token or payload and counted
(``tikk.results.refused`` by reason).

Runs are filed in the history under the server's clock at recording (``recorded_ms``), never
under a time the worker reported.

Token lifetime: a token is taken for as long as its attempt runs, however long that is (a
worker renews its message's lease while the handler runs, with no word to the server, and
Kafka has no lease at all), then for ``result_grace_ms`` after the attempt ended; and never
``Limits.max_delivery_age_ms`` after its delivery was fired (checked before any read).
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
from server.ops.keyed_locks import KeyedLocks
from server.ops.late_writes import LateWriteGuard
from server.ops.refusals import (
    ResultRefused,
    StartTooLate,
    cancelled_running,
    dispatched_at,
    refuse_if_expired,
    refuse_unless_dispatched,
    same_attempt,
    too_many_runs,
)
from server.ops.upcoming import UpcomingCounts
from tikk.backoff import retry_delay_ms
from tikk.clock import Clock
from tikk.delivery_tokens import DeliveryKeys, TokenRefused
from tikk.errors import BackendUnavailable, NotFound
from tikk.model import (
    DeadLetter,
    Delivery,
    DueEntry,
    ResultKind,
    RetryAt,
    RunRecord,
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
    """A success waiting in the coalescer, and whether the store applied it once its batch
    was written."""

    report: RunReport
    applied: bool = False


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
        upcoming: UpcomingCounts | None = None,
    ) -> None:
        self._store = store
        self._upcoming = upcoming
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
        # Further runs of one succeeded attempt are counted and appended one at a time, so
        # that a burst of them (one token replayed at once) cannot all pass the same count;
        # those of different attempts go on at once.
        self._extra_runs: KeyedLocks[tuple[str, str, int, int]] = KeyedLocks()

    async def record(self, report: RunReport) -> None:
        """Record ``report`` (see the module). Safe to repeat: the history keeps one record per
        run id, and a repeated or stale report leaves the task alone. Raises ``TokenRefused``
        or ``ResultRefused`` (logged and counted), ``StartTooLate`` for a start claim that
        lost to the attempt's expiry, ``BackendUnavailable``."""
        try:
            max_age = self._limits.max_delivery_age_ms
            self._keys.verify(report.delivery, self._clock.now_ms(), max_age)
            if report.kind is ResultKind.STARTED:
                await self._claim_start(report)
            elif report.kind is ResultKind.CANCELLED:
                await self._record_cancelled(report)
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
            extra={"namespace": e.namespace, "task_id": e.task_id, "queue": e.queue,
                   "run_id": report.run_id},
        )  # fmt: skip
        self._telemetry.result_refused(exc.reason)

    def _counted(self, report: RunReport, status: RunStatus) -> None:
        lateness = report.started_ms - report.entry.due_ms
        self._telemetry.run_recorded(report.entry.queue, status.name.lower(), lateness)

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
        first = await self._first_recording(report)
        running = dispatched_at(task, e)
        if first is None and cancelled_running(task, e):
            await self._record_after_cancel(report, task, RunStatus.CANCELLED, now)
            return
        if not running:
            if first is None:
                await self._refuse(task, e, now)  # raises: not a repeat
            else:
                refuse_if_expired(first.recorded_ms, now, self._limits.result_grace_ms)
        status, transition = self._decide(report, task, now)
        # A repeat is written again as first stored: it completes a write a crash cut short,
        # and changes nothing of the record.
        await self._history.append(report.record(status, now) if first is None else first)
        if first is None:
            self._counted(report, status)
        if isinstance(transition, DeadLetter) and running:
            # Before the task moves: if this fails the worker reports again, and the copy is
            # published then (at least once). Once it moved, the copy went out before: a
            # repeat publishes none (it would copy whatever error its sender wrote).
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
                [task] = await self._guard.confirm([task])
                if self._upcoming is not None:  # the retry waits for its due minute
                    self._upcoming.scheduled([task])
            if task is not None:
                await self._occurrence_finished(e, task.state)

    async def _record_success(self, report: RunReport) -> None:
        """Written with the successes that arrive meanwhile; one the store did not apply is
        looked into by its own caller, after the batch, so that a burst of repeats and
        duplicate deliveries (after a rebalance) reads concurrently, not one by one while the
        whole batch waits."""
        pending = _PendingSuccess(report)
        await self._successes.submit(pending)
        if pending.applied:
            await self._occurrence_finished(report.entry, TaskState.SUCCEEDED)
            return
        await self._not_applied(report, self._clock.now_ms())

    async def _write_successes(self, batch: Sequence[_PendingSuccess]) -> None:
        """One conditional write per task, with no read (a success needs none), then one
        history write for the runs it applied; each entry learns whether it was applied."""
        reports = [p.report for p in batch]
        now = self._clock.now_ms()
        moved = await self._store.succeed_many([r.entry for r in reports], now)
        done = [r for r, ok in zip(reports, moved, strict=True) if ok]
        # Before the others are looked into: a run of an attempt that just succeeded counts
        # its runs.
        await self._history.append_many([r.record(RunStatus.SUCCEEDED, now) for r in done])
        for report in done:
            self._counted(report, RunStatus.SUCCEEDED)
        for pending, ok in zip(batch, moved, strict=True):
            pending.applied = ok

    async def _not_applied(self, report: RunReport, now: int) -> None:
        """Look into a success the store did not apply: returns for a repeat or another run of
        the attempt that succeeded, once recorded, and raises why it is refused otherwise. A
        repeat also moves a retry the first report placed late (see
        ``server.ops.late_writes``)."""
        e = report.entry
        task = await self._current(e)
        first = await self._first_recording(report)
        if first is not None:
            if not dispatched_at(task, e):
                refuse_if_expired(first.recorded_ms, now, self._limits.result_grace_ms)
            # As first stored: completes a write a crash cut short, adds no record.
            await self._history.append(first)
        elif task.state is TaskState.SUCCEEDED and same_attempt(task, e):
            await self._another_run(report, task, now)
        elif cancelled_running(task, e):
            await self._record_after_cancel(report, task, RunStatus.SUCCEEDED, now)
        else:
            await self._refuse(task, e, now)
            # Still running that attempt: the store's write raced a change. Retriable.
            raise BackendUnavailable(
                f"task {e.task_id!r} changed while its success was written: report again"
            )
        await self._guard.confirm([task])

    async def _another_run(self, report: RunReport, task: Task, now: int) -> None:
        """Record another run of the attempt ``task`` succeeded at (a duplicate delivery's),
        within the grace after that success and while the attempt has fewer than
        ``max_extra_runs`` further runs. The count reads the task's newest runs: this rare
        path may read, the success path never does. One at a time per attempt in this
        process; servers racing on one attempt may each let one more through."""
        e, most = report.entry, self._limits.max_extra_runs
        refuse_if_expired(task.updated_ms, now, self._limits.result_grace_ms)
        async with self._extra_runs.held((e.namespace, e.task_id, e.attempt, e.due_ms)):
            newest = await self._history.list_for_task(e.namespace, e.task_id, most + 1, "")
            runs = sum((r.attempt, r.due_ms) == (e.attempt, e.due_ms) for r in newest.items)
            # One of them finished the attempt (none if a crash cut its write short).
            if runs > most:
                raise too_many_runs(e, most)
            await self._history.append(report.record(RunStatus.SUCCEEDED, now))
            self._counted(report, RunStatus.SUCCEEDED)
        self._telemetry.duplicate_run(e.queue)

    async def _record_cancelled(self, report: RunReport) -> None:
        """A run its worker stopped because its task was cancelled while it ran: recorded as
        CANCELLED (the task is CANCELLED already). ``not_cancelled`` if the task was not."""
        now, e = self._clock.now_ms(), report.entry
        task = await self._current(e)
        first = await self._first_recording(report)
        if first is not None:
            refuse_if_expired(first.recorded_ms, now, self._limits.result_grace_ms)
            await self._history.append(first)  # as first stored: adds no record
            return
        if not cancelled_running(task, e):
            if dispatched_at(task, e):
                raise ResultRefused(
                    "not_cancelled",
                    f"task {e.task_id!r} was not cancelled: report how its run ended",
                )
            await self._refuse(task, e, now)
        await self._record_after_cancel(report, task, RunStatus.CANCELLED, now)

    async def _record_after_cancel(
        self, report: RunReport, task: Task, status: RunStatus, now: int
    ) -> None:
        """Record a run of an attempt cancelled while it ran, as ``status``, within the grace
        after the cancel; the task stays CANCELLED."""
        refuse_if_expired(task.updated_ms, now, self._limits.result_grace_ms)
        await self._history.append(report.record(status, now))
        self._counted(report, status)

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

    async def _first_recording(self, report: RunReport) -> RunRecord | None:
        """This report's run as the history holds it, if it does (a repeat after a lost
        answer), with the time it was first recorded."""
        e = report.entry
        try:
            run = await self._history.get(e.namespace, report.run_id)
        except NotFound:
            return None
        same = (run.task_id, run.attempt, run.due_ms) == (e.task_id, e.attempt, e.due_ms)
        return run if same else None

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
