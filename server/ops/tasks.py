"""The task operations a client starts, independent of gRPC: ``TaskOps``.

Every create, single or imported, takes one path (``create_many``):

1. each queue is prepared first, on its own, so that one that fails holds up no other and a
   task accepted for a queue that cannot take it is never stored (its items get the
   queue's error);
2. the whole lot is admitted against the namespaces' quotas before anything of it is written
   (``server.ops.quotas``), or refused whole;
3. every due row is placed where a dispatcher will still read it, and one written too late is
   moved (``server.ops.late_writes``);
4. the store writes them: tasks under a client's id with the existence check that makes a
   repeated create idempotent, tasks under ids the server chose without it.

Cancels and re-drives go through the same guard; reads go to the store as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass

from server.ops.late_writes import LateWriteGuard
from server.ops.quotas import QuotaGate
from server.ops.upcoming import UpcomingCounts
from tikk.buckets import shard_of
from tikk.clock import Clock
from tikk.errors import FailedPrecondition, NotFound, TikkError
from tikk.model import Abandon, Page, Task, TaskState
from tikk.ready_queue import ReadyQueue
from tikk.store.tasks import TaskStore

# What creating one task came to: the task as stored and whether this call created it, or
# why it was refused.
Created = tuple[Task, bool] | TikkError

# Why a task cancelled while it ran ended (its last error message).
_CANCELLED_RUNNING = "cancelled while running"


@dataclass(frozen=True)
class RunningAttempt:
    """An attempt a worker runs, as its delivery names it (``cancelled_attempts``)."""

    namespace: str
    task_id: str
    queue: str
    attempt: int
    due_ms: int


class ImportStream:
    """The creates of one ImportTasks stream: it counts against the ``import_streams`` quota
    of each namespace it carries tasks of, from its first batch of that namespace on."""

    def __init__(self, tasks: TaskOps, quotas: QuotaGate) -> None:
        self._tasks = tasks
        self._quotas = quotas
        self.claimed: set[str] = set()

    async def create_many(self, tasks: Sequence[Task]) -> list[Created]:
        """``TaskOps.create_many``, once the stream holds a slot of each namespace of
        ``tasks``; raises ``ResourceExhausted`` (nothing written) if one has no slot left."""
        for namespace in sorted({t.namespace for t in tasks}):
            await self._quotas.claim_import_stream(namespace, self.claimed)
        return await self._tasks.create_many(tasks, paced=True)


class TaskOps:
    """Creates, cancels, re-drives and reads tasks (see the module)."""

    def __init__(
        self,
        store: TaskStore,
        queue: ReadyQueue,
        clock: Clock,
        *,
        guard: LateWriteGuard,
        quotas: QuotaGate,
        upcoming: UpcomingCounts | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._clock = clock
        self._guard = guard
        self._quotas = quotas
        self._upcoming = upcoming

    async def create(self, task: Task) -> tuple[Task, bool]:
        """``create_many`` of one task, raising its refusal."""
        [outcome] = await self.create_many([task])
        if isinstance(outcome, TikkError):
            raise outcome
        return outcome

    async def create_many(self, tasks: Sequence[Task], *, paced: bool = False) -> list[Created]:
        """Create ``tasks`` (see the module): one outcome per task, in order. Raises
        ``ResourceExhausted`` (nothing written) over a quota (``paced``: waits for the rate
        instead of refusing over it), ``BackendUnavailable`` when the
        store fails part-way (what was written stays, and a repeat creates nothing twice
        under client ids)."""
        refused = await self._prepare_each({t.queue for t in tasks})
        outcomes: dict[int, Created] = {
            i: refused[t.queue] for i, t in enumerate(tasks) if t.queue in refused
        }
        kept = [i for i in range(len(tasks)) if i not in outcomes]
        async with self._quotas.creating(Counter(tasks[i].namespace for i in kept), paced=paced):
            for assigned in (False, True):
                chosen = [i for i in kept if tasks[i].id_assigned is assigned]
                written = await self._write([tasks[i] for i in chosen], new_ids=assigned)
                outcomes.update(zip(chosen, written, strict=True))
        return [outcomes[i] for i in range(len(tasks))]

    async def _write(self, tasks: Sequence[Task], *, new_ids: bool) -> list[Created]:
        if not tasks:
            return []
        placed = [self._guard.place(t) for t in tasks]
        async with self._guard.watching((t.namespace, t.task_id) for t in placed):
            outcomes = await self._store.create_many(placed, new_ids=new_ids)
        kept = [o for o in outcomes if not isinstance(o, TikkError)]
        confirmed = await self._guard.confirm([t for t, _ in kept])
        if self._upcoming is not None:  # each created here waits for its due minute
            self._upcoming.scheduled(t for t, (_, new) in zip(confirmed, kept, strict=True) if new)
        stood = iter(confirmed)
        return [o if isinstance(o, TikkError) else (next(stood), o[1]) for o in outcomes]

    async def _prepare_each(self, queues: Collection[str]) -> dict[str, TikkError]:
        """Prepare each of ``queues`` on its own; returns the error of each that failed."""
        ordered = sorted(queues)
        outcomes = await asyncio.gather(
            *(self._queue.prepare([q]) for q in ordered), return_exceptions=True
        )
        refused: dict[str, TikkError] = {}
        for queue, outcome in zip(ordered, outcomes, strict=True):
            if isinstance(outcome, TikkError):
                refused[queue] = outcome
            elif isinstance(outcome, BaseException):
                raise outcome
        return refused

    @contextlib.asynccontextmanager
    async def importing(self) -> AsyncIterator[ImportStream]:
        """An import stream's creates, its quota slots released when the block ends."""
        stream = ImportStream(self, self._quotas)
        try:
            yield stream
        finally:
            self._quotas.release_import_streams(stream.claimed)

    async def cancel(self, namespace: str, task_id: str, *, stop_running: bool = False) -> Task:
        """Cancel a task not dispatched yet, which then never runs (``TaskStore.cancel``).
        With ``stop_running``, a dispatched one ends its attempt CANCELLED at once
        (``Abandon``: no retry, and no later report changes it), and its worker, asking
        ``cancelled_attempts``, stops it; without, that is ``FailedPrecondition``."""
        began = self._clock.now_ms()
        try:
            task = await self._store.cancel(namespace, task_id, self._clock)
        except FailedPrecondition:
            if not stop_running:
                raise
            running = await self._store.get(namespace, task_id)
            if running.state is not TaskState.DISPATCHED:
                raise
            return await self._cancel_running(running)
        if self._upcoming is not None and task.updated_ms >= began:  # this call cancelled it
            self._upcoming.scheduled([task], -1)
        return task

    async def _cancel_running(self, task: Task) -> Task:
        now = self._clock.now_ms()
        ended = await self._store.finish_attempt(
            task.namespace, task.task_id, task.attempt, Abandon(_CANCELLED_RUNNING), now
        )
        if ended is None:
            raise FailedPrecondition(
                f"task {task.task_id!r} moved on from attempt {task.attempt} while it was "
                "cancelled: ask again"
            )
        return ended

    async def cancelled_attempts(self, runs: Sequence[RunningAttempt]) -> list[bool]:
        """For each attempt a worker runs, whether its task was cancelled while it ran (and is
        of the queue the worker named: a worker learns nothing of other queues' tasks)."""

        async def one(run: RunningAttempt) -> bool:
            try:
                task = await self._store.get(run.namespace, run.task_id)
            except NotFound:
                return False
            return task.queue == run.queue and task.cancelled_running(run.attempt, run.due_ms)

        return list(await asyncio.gather(*(one(r) for r in runs)))

    async def cancel_many(self, namespace: str, task_ids: Sequence[str]) -> list[Task | TikkError]:
        """``cancel`` of each, written together where the store can; one outcome each."""
        began = self._clock.now_ms()
        outcomes = await self._store.cancel_many(namespace, task_ids, self._clock)
        if self._upcoming is not None:
            mine = [t for t in outcomes if isinstance(t, Task) and t.updated_ms >= began]
            self._upcoming.scheduled(mine, -1)
        return outcomes

    async def redrive(self, namespace: str, task_id: str) -> Task:
        """Schedule a dead-lettered task again, now, with a fresh attempt count."""
        shard = shard_of(namespace, task_id, self._store.shard_count)
        due = self._guard.place_due(shard, self._clock.now_ms())
        async with self._guard.watching([(namespace, task_id)]):
            redriven = await self._store.redrive(namespace, task_id, due)
        [task] = await self._guard.confirm([redriven])
        if self._upcoming is not None:
            self._upcoming.scheduled([task])
        return task

    async def reschedule(
        self, namespace: str, task_id: str, run_at_ms: int, payload: bytes | None
    ) -> Task:
        """Move a scheduled task to ``run_at_ms`` (a time already past runs it now), with a
        new payload if given: placed, watched and confirmed as a create's due row is."""
        before = await self._store.get(namespace, task_id)
        due = self._guard.place_due(before.shard, max(run_at_ms, self._clock.now_ms()))
        now = self._clock.now_ms()
        async with self._guard.watching([(namespace, task_id)]):
            moved = await self._store.reschedule(
                namespace, task_id, to_ms=due, payload=payload, now_ms=now
            )
        [task] = await self._guard.confirm([moved])
        if self._upcoming is not None:
            self._upcoming.scheduled([before], -1)
            self._upcoming.scheduled([task])
        return task

    async def purge(self, namespace: str, task_id: str) -> Task:
        """Delete a dead-lettered task for good (see ``TaskStore.purge_dead_letter``)."""
        return await self._store.purge_dead_letter(namespace, task_id)

    async def get(self, namespace: str, task_id: str) -> Task:
        return await self._store.get(namespace, task_id)

    async def list_tasks(
        self, namespace: str, queue: str, state: TaskState | None, size: int, token: str
    ) -> Page[Task]:
        return await self._store.list_tasks(namespace, queue, state, size, token)

    async def dead_letters(self, namespace: str, queue: str, size: int, token: str) -> Page[Task]:
        """Dead-lettered tasks of the namespace, of one queue or ("") of all."""
        now = self._clock.now_ms()
        return await self._store.list_dead_letters(namespace, queue, size, token, now)
