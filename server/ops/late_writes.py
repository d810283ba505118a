"""Keeping the server's due-index writes where a dispatcher will still read them.

A dispatcher fires every row whose write completes less than the grace period after its due
time (``dispatcher.scanner``): it moves a shard's cursor past a second only after reading it
once that grace has passed. The server writes rows due "now" (creates, retries, re-drives), so
two things could still put a row behind a cursor, and both are caught here:

* **A clock behind the dispatchers'.** Before a write, a row due at or just after its shard's
  cursor (as last read; all cursors are read in one query every ``refresh_ms``) is placed
  after the cursor instead: later than asked, never earlier. The gap is logged and counted
  (``tikk.late_writes`` with ``reason=skew``): a cursor ahead of this server's clock means the
  clocks disagree by more than the dispatchers tolerate.
* **A write that took too long** (a stalled store answering late). After a write, a row due
  "now" that became durable more than half the grace period after its due time is moved to
  the start of the present second, if its task is still SCHEDULED at that attempt
  (``reason=slow``). Half, so that clocks disagreeing by up to the other half are covered
  too.
* **A write whose outcome is unknown** (the store timed out, or the call was cancelled): it
  may still land later, behind a cursor. Such tasks are *in doubt*; once the store answers
  again each is read back, and if it exists and is still SCHEDULED it is confirmed as above.
  One never found for ``settle_ms`` of successful reads was never written.

A re-placed row keeps its task's ``scheduled_ms`` (and so its idempotency key); only the
instant of the attempt moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass

from tikk.buckets import second_of
from tikk.clock import Clock
from tikk.errors import BackendUnavailable, NotFound
from tikk.model import Cursor, Task, TaskState
from tikk.store.tasks import TaskStore
from tikk.telemetry import Telemetry

log = logging.getLogger("tikk.server")

# Seconds a cursor may have moved since it was read: the refresh interval plus the
# dispatchers' cursor flush interval, rounded up.
_CURSOR_DRIFT_S = 3
# Tasks in doubt kept at most (the oldest are given up, with a warning, beyond this) and
# read back per pass.
_MAX_DOUBTS = 100_000
_DOUBTS_PER_PASS = 500


@dataclass
class _Doubt:
    namespace: str
    task_id: str
    # When a successful read first found no such task (None: not read yet).
    absent_since_ms: int | None = None


class LateWriteGuard:
    """Places due rows ahead of the dispatch cursors and re-places rows written too late."""

    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        *,
        grace_ms: int,
        refresh_ms: int = 1_000,
        settle_ms: int = 30_000,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._slow_ms = grace_ms // 2
        self._refresh_ms = refresh_ms
        self._telemetry = telemetry or Telemetry()
        self._settle_ms = settle_ms
        self._cursors: dict[int, Cursor] = {}
        self._doubts: dict[tuple[str, str], _Doubt] = {}
        self._refresher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Read the cursors now, then keep them fresh in the background."""
        await self.refresh()
        self._refresher = asyncio.create_task(self._refresh_forever(), name="tikk-cursor-view")

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher

    async def refresh(self) -> None:
        self._cursors = await self._store.get_cursors()

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_ms / 1000)
            try:
                await self.refresh()
                await self.settle_doubts()
            except BackendUnavailable as exc:
                log.info("reading the dispatch cursors failed (%s); keeping the last view", exc)

    @property
    def in_doubt(self) -> int:
        """Tasks whose last write's outcome is still unknown."""
        return len(self._doubts)

    @contextlib.asynccontextmanager
    async def watching(self, keys: Iterable[tuple[str, str]]) -> AsyncIterator[None]:
        """Around a write of the tasks ``(namespace, task_id)``: if it fails or is cancelled,
        they are in doubt."""
        try:
            yield
        except BaseException:
            for namespace, task_id in keys:
                self._doubts[(namespace, task_id)] = _Doubt(namespace, task_id)
            while len(self._doubts) > _MAX_DOUBTS:
                oldest = next(iter(self._doubts))
                log.warning("too many writes in doubt; no longer checking %s/%s", *oldest)
                del self._doubts[oldest]
            raise

    async def settle_doubts(self) -> None:
        """Read back tasks in doubt (a bounded number per call) and confirm those that exist;
        raises ``BackendUnavailable`` if the store does not answer (they stay in doubt)."""
        now = self._clock.now_ms()
        for key, doubt in list(self._doubts.items())[:_DOUBTS_PER_PASS]:
            try:
                task = await self._store.get(doubt.namespace, doubt.task_id)
            except NotFound:
                doubt.absent_since_ms = doubt.absent_since_ms or now
                if now - doubt.absent_since_ms >= self._settle_ms:
                    del self._doubts[key]  # never written
                continue
            del self._doubts[key]
            await self.confirm([task])

    def place(self, task: Task) -> Task:
        """``task`` with its pending attempt due after its shard's cursor (unchanged unless
        the cursor is within reach of its due time)."""
        due = self.place_due(task.shard, task.due_ms)
        return task if due == task.due_ms else task.evolve(due_ms=due)

    def place_due(self, shard: int, due_ms: int) -> int:
        """A due time for a row of ``shard``: ``due_ms``, or the first safe second after the
        shard's cursor if ``due_ms`` is within reach of it."""
        cursor = self._cursors.get(shard)
        if cursor is None or second_of(due_ms) > cursor.second + _CURSOR_DRIFT_S:
            return due_ms
        placed = (cursor.second + _CURSOR_DRIFT_S + 1) * 1000
        log.warning(
            "clock skew: a row due at %d s would land behind shard %d's cursor (%d s); placed "
            "at %d s. The dispatchers' clocks run ahead of this server's.",
            second_of(due_ms), shard, cursor.second, placed // 1000,
        )  # fmt: skip
        self._telemetry.late_write("skew")
        return placed

    async def confirm(self, tasks: Sequence[Task]) -> list[Task]:
        """After a write: move each task whose row became durable too late to now. Returns
        the tasks as they stand (moved or as given)."""
        now = self._clock.now_ms()
        return [await self._confirm_one(t, now) for t in tasks]

    async def _confirm_one(self, task: Task, now: int) -> Task:
        if task.state is not TaskState.SCHEDULED or now - task.due_ms <= self._slow_ms:
            return task
        # A new second (the cursor may already be past the old one), and its first instant:
        # two movers of one task in the same second (a create's and a read-back's) then
        # write the same row. A due row is keyed by its second, so the loser's row would
        # otherwise overwrite the winner's with an instant the task does not have, and the
        # dispatcher would drop it as stale.
        to_ms = max(second_of(now), second_of(task.due_ms) + 1) * 1000
        try:
            moved = await self._store.move_due(
                task.namespace, task.task_id, attempt=task.attempt, due_ms=task.due_ms,
                to_ms=to_ms, now_ms=now,
            )  # fmt: skip
        except NotFound:
            return task
        if moved is None:
            return task  # a dispatcher took it meanwhile: it was read in time
        log.warning(
            "slow write: task %s/%s due at %d became durable %d ms later; moved to %d",
            task.namespace, task.task_id, task.due_ms, now - task.due_ms, to_ms,
            extra={"namespace": task.namespace, "task_id": task.task_id, "queue": task.queue},
        )  # fmt: skip
        self._telemetry.late_write("slow")
        return moved
