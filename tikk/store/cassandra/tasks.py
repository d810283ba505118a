"""Task store on Cassandra (``cassandra://host:port/keyspace``); semantics in ``tikk.store.tasks``.

Tables (``tikk.store.cassandra.schema``): ``tasks`` by id, ``due_index`` partitioned by (shard,
minute) and clustered by (second, task key), ``cursors`` with the owner's fencing epoch,
``tasks_by_queue`` and ``dead_letters`` for listings. Prepared statements only, no ALLOW
FILTERING, no secondary indexes.

Consistency without Paxos on the hot path: a task with a client-chosen id is created with a
lightweight transaction (``IF NOT EXISTS``, which gives idempotent create and ALREADY_EXISTS),
then its due row and listing, then a mark that makes it visible; server-assigned ids are
unique and need no transaction. Creates are written many at a time: task rows concurrently,
the rows that point at them in one unlogged batch per partition. A create is whole or
invisible: if a process dies between the writes of a client-id create, the RPC never
returned OK, the half-written task is not found by any read or listing, and the client's
retry (same id, same content) completes it. Cancel is refused within
``cancel_fence_ms`` of the due time: the dispatcher checks the task row when it fires, and a
cancel acknowledged at least that long before is visible to that read, whereas a closer one
might race it without a consensus round per fire. A cancel checked outside the fence but
acknowledged inside it (the store stalled) is therefore not answered OK: ``CancelUnsettled``.

The class below is the store; its parts live beside it: ``task_rows`` (how a task is laid out
in rows), ``task_creates``, ``claims`` (dispatch and start claims), ``successes`` and
``listings``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from tikk.buckets import minute_of_second, second_of, task_key
from tikk.clock import Clock
from tikk.drivers.cassandra import CassandraSession
from tikk.drivers.cassandra_batches import MAX_BATCH_PARTITIONS, PartitionRow
from tikk.errors import (
    BackendUnavailable,
    CancelUnsettled,
    FailedPrecondition,
    NotFound,
    TikkError,
)
from tikk.model import (
    START_TIMEOUT,
    Claimed,
    Cursor,
    DeadLetter,
    DueEntry,
    Page,
    Task,
    TaskState,
    Transition,
    apply_transition,
)
from tikk.store.cassandra.claims import claim_attempt_start, claim_due
from tikk.store.cassandra.listings import (
    count_label_tasks,
    dead_letter_delete,
    dead_letter_write,
    label_listing_deletes,
    list_dead_tasks,
    list_label_tasks,
    list_queue_tasks,
    queue_listing_delete,
)
from tikk.store.cassandra.quotas import count_usage
from tikk.store.cassandra.schema import (
    DUE_RETENTION_S,
    INIT_CURSOR,
    MIN_TASK_RETENTION_S,
    TASK_RETENTION_S,
)
from tikk.store.cassandra.successes import succeed_after_read
from tikk.store.cassandra.task_creates import create_tasks
from tikk.store.cassandra.task_moves import DELETE_DUE, move_task, update_task_if
from tikk.store.cassandra.task_rows import (
    INSERT_DUE,
    cells_ttl,
    due_values,
    label_writes,
    listing_write,
    read_due_rows,
    read_task,
    read_task_row,
    task_from_cql_row,
    ttl_after,
)
from tikk.store.tasks import (
    check_shard_count,
    require_dead_lettered,
    require_scheduled,
)

# Success needs no read: the delivery names the attempt, and the condition makes a stale
# report a no-op. Its TTL ends with the row's other cells (written for this due time), so
# the row never outlives them with only these two cells.
INIT_META = "INSERT INTO store_meta (key, value) VALUES (?, ?) IF NOT EXISTS"
# Only the mark: an UPDATE writes no other cell, so it never revives a row's other columns.
HAND_OFF = (
    "UPDATE due_index USING TTL ? SET handed_off_ms = ?"
    " WHERE shard = ? AND minute = ? AND second = ? AND task_key = ?"
)
# With the TTL of the row's other cells: a cell without one would keep a husk of the row
# (its state and update time) after the rest expired, for ever.
SET_STATE = (
    "UPDATE tasks USING TTL ? SET state = ?, updated_ms = ? WHERE namespace = ? AND task_id = ?"
)
SET_UPDATED = "UPDATE tasks USING TTL ? SET updated_ms = ? WHERE namespace = ? AND task_id = ?"
SELECT_CURSOR = "SELECT second, epoch FROM cursors WHERE ring = 0 AND shard = ?"
SELECT_CURSORS = "SELECT shard, second, epoch FROM cursors WHERE ring = 0"
MOVE_CURSOR = "UPDATE cursors SET second = ?, epoch = ? WHERE ring = 0 AND shard = ? IF epoch = ?"


# A purge deletes the task only as it was read (still dead-lettered, not re-driven since).
PURGE_TASK = "DELETE FROM tasks WHERE namespace = ? AND task_id = ? IF state = ? AND updated_ms = ?"


class CassandraTaskStore:
    """``TaskStore`` on a keyspace; ``session`` may be shared with the other backends of the
    keyspace (``start``/``close`` count its users)."""

    def __init__(
        self, session: CassandraSession, shard_count: int, *, cancel_fence_ms: int = 2_000
    ) -> None:
        self._db = session
        self._shard_count = shard_count
        self.cancel_fence_ms = cancel_fence_ms
        # Namespaces whose task rows are kept other than TASK_RETENTION_S (``keep_for``).
        self._kept_s: dict[str, int] = {}

    def keep_for(self, namespace: str, seconds: int | None) -> None:
        if seconds is None:
            self._kept_s.pop(namespace, None)
        else:
            self._kept_s[namespace] = max(MIN_TASK_RETENTION_S, seconds)

    def _retention_s(self, namespace: str) -> int:
        return self._kept_s.get(namespace, TASK_RETENTION_S)

    @property
    def shard_count(self) -> int:
        return self._shard_count

    @property
    def session(self) -> CassandraSession:
        """The keyspace's session, shared by the schedule store of the same keyspace."""
        return self._db

    async def start(self) -> None:
        await self._db.start()

    async def ping(self) -> None:
        await self._db.ping("store")

    async def create(self, task: Task) -> tuple[Task, bool]:
        [outcome] = await self.create_many([task])
        if isinstance(outcome, TikkError):
            raise outcome
        return outcome

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        return await create_tasks(self._db, tasks, new_ids=new_ids, retention=self._retention_s)

    async def get(self, namespace: str, task_id: str) -> Task:
        return await read_task(self._db, namespace, task_id)

    async def check_shard_count(self) -> None:
        rows = await self._db.execute(INIT_META, ["shard_count", str(self._shard_count)])
        if rows and not rows[0][0]:
            check_shard_count(int(rows[0].value), self._shard_count)

    async def cancel(self, namespace: str, task_id: str, clock: Clock) -> Task:
        row = await read_task_row(self._db, namespace, task_id)
        task = task_from_cql_row(row)
        if task.state is TaskState.CANCELLED:
            if not self._held(task, task.updated_ms):
                raise self._unsettled(task)
            return task
        require_scheduled(task, "cancelled")
        # The time after the read, not when the call began: the read may have waited.
        now_ms = clock.now_ms()
        if not self._held(task, now_ms):
            raise FailedPrecondition(
                f"task {task_id!r} is due within {self.cancel_fence_ms} ms and may already be "
                "dispatched; it can no longer be cancelled"
            )
        ttl = cells_ttl(row, task.due_ms, now_ms)
        await self._db.execute(
            SET_STATE, [ttl, int(TaskState.CANCELLED), now_ms, namespace, task_id]
        )
        written_ms = clock.now_ms()
        settled = self._held(task, written_ms)
        if not settled:
            # Marked so that asking again gives the same answer rather than OK.
            await self._db.execute(SET_UPDATED, [ttl, written_ms, namespace, task_id])
        count_usage(self._db, [(namespace, -1)])
        second = second_of(task.due_ms)
        key = task_key(namespace, task_id)
        await self._db.execute(DELETE_DUE, [task.shard, minute_of_second(second), second, key])
        if not settled:
            raise self._unsettled(task)
        return task.evolve(state=TaskState.CANCELLED, updated_ms=now_ms)

    async def cancel_many(
        self, namespace: str, task_ids: Sequence[str], clock: Clock
    ) -> list[Task | TikkError]:
        async def one(task_id: str) -> Task | TikkError:
            try:
                return await self.cancel(namespace, task_id, clock)
            except (NotFound, FailedPrecondition, CancelUnsettled) as exc:
                return exc

        return list(await asyncio.gather(*(one(t) for t in task_ids)))

    def _held(self, task: Task, at_ms: int) -> bool:
        """Whether a cancel known written at ``at_ms`` is seen by every claim of ``task``."""
        return task.due_ms - at_ms >= self.cancel_fence_ms

    def _unsettled(self, task: Task) -> CancelUnsettled:
        return CancelUnsettled(
            f"task {task.task_id!r} is cancelled, but the store acknowledged the cancel within "
            f"{self.cancel_fence_ms} ms of its due time, when a dispatcher may already have "
            "claimed it: it may still run once (a result of that run is refused)"
        )

    async def list_tasks(
        self, namespace: str, queue: str, state: TaskState | None, page_size: int, page_token: str
    ) -> Page[Task]:
        return await list_queue_tasks(
            self._db, self._shard_count, namespace, queue,
            state=state, page_size=page_size, page_token=page_token,
        )  # fmt: skip

    async def list_by_label(
        self, namespace: str, label: tuple[str, str], page_size: int, page_token: str
    ) -> Page[Task]:
        return await list_label_tasks(
            self._db, self._shard_count, namespace, label,
            page_size=page_size, page_token=page_token,
        )  # fmt: skip

    async def count_by_label(
        self, namespace: str, label: tuple[str, str], state: TaskState | None, most: int
    ) -> tuple[int, bool]:
        return await count_label_tasks(
            self._db, self._shard_count, namespace, label, state=state, most=most
        )

    async def list_dead_letters(
        self, namespace: str, queue: str, page_size: int, page_token: str, now_ms: int
    ) -> Page[Task]:
        return await list_dead_tasks(
            self._db, namespace, queue, page_size=page_size, page_token=page_token, now_ms=now_ms
        )

    async def read_due(
        self,
        shard: int,
        after: tuple[int, str],
        until_second: int,
        limit: int,
        *,
        unsent_only: bool = False,
    ) -> list[DueEntry]:
        return await read_due_rows(
            self._db, shard, after, until_second, limit, unsent_only=unsent_only
        )

    async def mark_dispatched(self, entries: Sequence[DueEntry], now_ms: int) -> Claimed:
        return await claim_due(self._db, entries, now_ms)

    async def claim_start(self, entry: DueEntry, now_ms: int) -> bool:
        return await claim_attempt_start(self._db, entry, "started", now_ms)

    async def expire_start(self, entry: DueEntry, reason: str, now_ms: int) -> Task | None:
        if not await claim_attempt_start(self._db, entry, "expired", now_ms):
            return None
        ns, tid = entry.namespace, entry.task_id
        try:
            task = await self.get(ns, tid)
            if (task.attempt, task.due_ms) != (entry.attempt, entry.due_ms):
                return None
            expiry = DeadLetter(START_TIMEOUT, reason)
            task = await self.finish_attempt(ns, tid, entry.attempt, expiry, now_ms) or (
                await self.get(ns, tid)
            )
        except NotFound:
            return None
        expired = task.state is TaskState.DEAD_LETTERED and task.last_error_type == START_TIMEOUT
        return task if expired and task.attempt == entry.attempt else None

    async def mark_handed_off(self, entries: Sequence[DueEntry], now_ms: int) -> None:
        # A partition's rows go together, a few partitions per request.
        rows = [_hand_off_row(e, now_ms) for e in entries]
        await self._db.execute_many(self._db.partition_batches(rows, MAX_BATCH_PARTITIONS))

    async def finish_attempt(
        self, namespace: str, task_id: str, attempt: int, transition: Transition, now_ms: int
    ) -> Task | None:
        task = await self.get(namespace, task_id)
        if task.state is not TaskState.DISPATCHED or task.attempt != attempt:
            await self._heal_finished(task, attempt, now_ms)
            return None
        updated = apply_transition(task, transition, now_ms)
        if not await self._update_if(updated, task, now_ms):
            # Moved between the read and the write: perhaps by an earlier report of this
            # attempt whose outcome its server never learnt (a store that stalled, a process
            # killed), so its other rows may be missing too.
            await self._heal_finished(await self.get(namespace, task_id), attempt, now_ms)
            return None
        if updated.state.finished:
            count_usage(self._db, [(namespace, -1)])
        await self._write_finished(updated, now_ms)
        return updated

    async def _update_if(self, new: Task, read: Task, now_ms: int) -> bool:
        return await update_task_if(self._db, new, read, now_ms, self._retention_s(new.namespace))

    async def _write_finished(self, t: Task, now_ms: int) -> None:
        """The rows of other partitions that a finished attempt needs: the retry's due row,
        or the dead-letter listing. Written after the task row, so a report repeated after a
        crash in between writes them again (``_heal_finished``)."""
        if t.state is TaskState.SCHEDULED:
            await self._db.execute(INSERT_DUE, due_values(t.entry(), now_ms))
        elif t.state is TaskState.DEAD_LETTERED:
            await self._db.execute(*dead_letter_write(t, self._retention_s(t.namespace)))

    async def _heal_finished(self, task: Task, attempt: int, now_ms: int) -> None:
        """A repeated report of ``attempt`` finds the task moved on already: if that was by
        this attempt's report, write its other rows again (idempotent), in case the process
        that moved it died before it wrote them."""
        retried = task.state is TaskState.SCHEDULED and task.attempt == attempt + 1
        dead = task.state is TaskState.DEAD_LETTERED and task.attempt == attempt
        if retried or dead:
            await self._write_finished(task, now_ms)

    async def succeed_many(self, entries: Sequence[DueEntry], now_ms: int) -> list[bool]:
        done = await succeed_after_read(self._db, entries, now_ms)
        finished = [(e.namespace, -1) for e, ok in zip(entries, done, strict=True) if ok]
        count_usage(self._db, finished)
        return done

    async def redrive(self, namespace: str, task_id: str, now_ms: int) -> Task:
        task = await self.get(namespace, task_id)
        require_dead_lettered(task)
        again = task.evolve(state=TaskState.SCHEDULED, attempt=1, due_ms=now_ms, updated_ms=now_ms)
        # The task row first (and only from the state read: two re-drives move it once), then
        # the rows that point at it, for the reason given in create_many.
        if not await self._update_if(again, task, now_ms):
            raise FailedPrecondition(f"task {task_id!r} changed while it was re-driven; retry")
        count_usage(self._db, [(namespace, 1)])
        ttl = ttl_after(again.due_ms, now_ms, self._retention_s(namespace))
        await self._db.execute_batch([
            (INSERT_DUE, due_values(again.entry(), now_ms)),
            listing_write(again, ttl),
            *label_writes(again, ttl),
            dead_letter_delete(task),
        ])  # fmt: skip
        return again

    async def purge_dead_letter(self, namespace: str, task_id: str) -> Task:
        task = await self.get(namespace, task_id)
        require_dead_lettered(task)
        # Only the task as read: a re-drive in between wins, and nothing is deleted.
        params = [namespace, task_id, int(TaskState.DEAD_LETTERED), task.updated_ms]
        if not (await self._db.execute(PURGE_TASK, params))[0][0]:
            raise FailedPrecondition(f"task {task_id!r} changed while it was purged; look again")
        await self._db.execute_batch(
            [dead_letter_delete(task), queue_listing_delete(task), *label_listing_deletes(task)]
        )
        return task

    async def move_due(
        self, namespace: str, task_id: str, *, attempt: int, due_ms: int, to_ms: int, now_ms: int
    ) -> Task | None:
        task = await self.get(namespace, task_id)
        if (task.state, task.attempt, task.due_ms) != (TaskState.SCHEDULED, attempt, due_ms):
            return None
        moved = task.evolve(due_ms=to_ms, updated_ms=now_ms)
        kept = self._retention_s(namespace)
        return moved if await move_task(self._db, task, moved, now_ms, kept) else None

    async def reschedule(
        self, namespace: str, task_id: str, *, to_ms: int, payload: bytes | None, now_ms: int
    ) -> Task:
        task = await self.get(namespace, task_id)
        require_scheduled(task, "rescheduled")
        moved = task.evolve(
            due_ms=to_ms, updated_ms=now_ms, payload=task.payload if payload is None else payload
        )
        if not await move_task(self._db, task, moved, now_ms, self._retention_s(namespace)):
            raise FailedPrecondition(
                f"task {task_id!r} changed while it was rescheduled (dispatched, cancelled or "
                "moved); look again"
            )
        return moved

    async def prune_finished(self, namespace: str, before_ms: int, most: int) -> int:
        return 0  # every row carries a TTL of the retention (``schema.TASK_RETENTION_S``)

    async def get_cursors(self) -> dict[int, Cursor]:
        rows = await self._db.execute(SELECT_CURSORS, [])
        return {r.shard: Cursor(r.second, r.epoch) for r in rows}

    async def get_cursor(self, shard: int) -> Cursor:
        rows = await self._db.execute(SELECT_CURSOR, [shard])
        return Cursor(0, 0) if not rows else Cursor(rows[0].second, rows[0].epoch)

    async def advance_cursors(self, moves: Mapping[int, Cursor]) -> set[int]:
        for _ in range(5):
            current = {r.shard: Cursor(r.second, r.epoch)
                       for r in await self._db.execute(SELECT_CURSORS, [])}  # fmt: skip
            refused = {s for s, m in moves.items() if s in current and current[s].epoch > m.epoch}
            writes = [_cursor_write(s, m, current.get(s)) for s, m in moves.items()
                      if s not in refused]  # fmt: skip
            if not writes or await self._db.execute_conditional_batch(writes):
                return refused
            # Another owner wrote in between: read again and re-decide.
        raise BackendUnavailable("cursor update kept conflicting with another owner")

    async def close(self) -> None:
        await self._db.close()


def _cursor_write(shard: int, move: Cursor, current: Cursor | None) -> tuple[str, list[Any]]:
    """A fenced write: it applies only if the row is still what was read."""
    if current is None:
        return INIT_CURSOR, [shard, move.second, move.epoch]
    second = max(move.second, current.second)
    return MOVE_CURSOR, [second, move.epoch, shard, current.epoch]


def _hand_off_row(e: DueEntry, now_ms: int) -> PartitionRow:
    minute = minute_of_second(e.second)
    ttl = ttl_after(e.due_ms, now_ms, DUE_RETENTION_S)
    params = [ttl, e.due_ms, e.shard, minute, e.second, e.key]
    return PartitionRow((e.shard, minute), HAND_OFF, params, 60)
