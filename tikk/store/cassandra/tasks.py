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
might race it without a consensus round per fire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tikk.buckets import minute_of_second, minutes_between, second_of, task_key
from tikk.drivers.cassandra import CassandraSession, PartitionRow
from tikk.errors import (
    AlreadyExists,
    BackendUnavailable,
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
    RetryPolicy,
    Task,
    TaskState,
    Transition,
    apply_transition,
)
from tikk.paging import decode_token, encode_token
from tikk.store.cassandra.quotas import count_usage
from tikk.store.cassandra.schema import DUE_RETENTION_S, INIT_CURSOR, TASK_RETENTION_S
from tikk.store.tasks import DUE_READ_COLUMNS, DUE_WRITE_COLUMNS, TASK_COLUMNS, check_shard_count

_TASK_COLS = ", ".join(TASK_COLUMNS)
_DUE_COLS = ", ".join(DUE_READ_COLUMNS)
_MARKS = ", ".join("?" * len(TASK_COLUMNS))
# A create with a client id writes the task row first (IF NOT EXISTS) marked create_pending,
# then its due row, listing and create_done in one logged batch. A task that has the first
# mark and not the second is invisible. Two cells written once each, rather than one flipped,
# because a conditional write and a plain one on the same cell are ordered by their
# timestamps, which come from different clocks.
CREATE_TASK = (
    f"INSERT INTO tasks ({_TASK_COLS}, create_pending) VALUES ({_MARKS}, true)"
    " IF NOT EXISTS USING TTL ?"
)
# An id the server assigned is fresh and nobody knows it before the create returns, so its
# task row needs neither a transaction nor the marks: a create that dies before its due row
# leaves a row no listing shows and no client can name, which its TTL removes.
CREATE_NEW_TASK = f"INSERT INTO tasks ({_TASK_COLS}) VALUES ({_MARKS}) USING TTL ?"
COMPLETE_CREATE = (
    "UPDATE tasks USING TTL ? SET create_done = true WHERE namespace = ? AND task_id = ?"
)
SELECT_TASK = (
    f"SELECT {_TASK_COLS}, create_pending, create_done, WRITETIME(state) AS state_written"
    " FROM tasks WHERE namespace = ? AND task_id = ?"
)
# Moving a task on (a finished attempt, a moved due time) is conditional on the state it was
# read in: two reports of one run, or a report racing a dispatcher, must not overwrite each
# other's progress (a read-then-write would let a late duplicate set a dispatched attempt
# back to scheduled). All of the row is rewritten so every cell gets the new TTL.
_SETTABLE = [c for c in TASK_COLUMNS if c not in ("namespace", "task_id")]
UPDATE_TASK_IF = (
    f"UPDATE tasks USING TTL ? SET {', '.join(f'{c} = ?' for c in _SETTABLE)}"
    " WHERE namespace = ? AND task_id = ? IF state = ? AND attempt = ? AND due_ms = ?"
)
# Success needs no read: the delivery names the attempt, and the condition makes a stale
# report a no-op. Its TTL ends with the row's other cells (written for this due time), so
# the row never outlives them with only these two cells.
SUCCEED_IF = (
    "UPDATE tasks USING TTL ? SET state = ?, updated_ms = ? WHERE namespace = ? AND task_id = ?"
    " IF state = ? AND attempt = ? AND due_ms = ?"
)
CLAIM_START = (
    "INSERT INTO start_claims (namespace, task_id, attempt, due_ms, claim, claimed_ms)"
    " VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?"
)
SELECT_META = "SELECT value FROM store_meta WHERE key = ?"
INIT_META = "INSERT INTO store_meta (key, value) VALUES (?, ?) IF NOT EXISTS"
INSERT_DUE = (
    f"INSERT INTO due_index ({', '.join(DUE_WRITE_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(DUE_WRITE_COLUMNS))}) USING TTL ?"
)
# Only the mark: an UPDATE writes no other cell, so it never revives a row's other columns.
HAND_OFF = (
    "UPDATE due_index USING TTL ? SET handed_off_ms = ?"
    " WHERE shard = ? AND minute = ? AND second = ? AND task_key = ?"
)
DELETE_DUE = "DELETE FROM due_index WHERE shard = ? AND minute = ? AND second = ? AND task_key = ?"
SELECT_DUE = (
    f"SELECT {_DUE_COLS} FROM due_index WHERE shard = ? AND minute = ?"
    " AND (second, task_key) > (?, ?) AND (second, task_key) < (?, ?) LIMIT ?"
)
INSERT_BY_QUEUE = (
    "INSERT INTO tasks_by_queue (namespace, queue, shard, task_id) VALUES (?, ?, ?, ?) USING TTL ?"
)
SELECT_BY_QUEUE = (
    "SELECT task_id FROM tasks_by_queue WHERE namespace = ? AND queue = ? AND shard = ?"
    " AND task_id > ? LIMIT ?"
)
SET_STATE = "UPDATE tasks SET state = ?, updated_ms = ? WHERE namespace = ? AND task_id = ?"
# A dispatcher's claim (SCHEDULED -> DISPATCHED) takes no transaction: it is written one
# microsecond after the state it read, so every write made after that read (a report, a
# move, a cancel, another dispatcher's claim) outranks it. A dispatcher that stalled
# between its read and its write (paused, or its store slow) cannot set a task that has
# moved on since back to dispatched, where nothing would ever finish it.
CLAIM_DISPATCH = (
    "UPDATE tasks USING TIMESTAMP ? SET state = ?, updated_ms = ?"
    " WHERE namespace = ? AND task_id = ?"
)
# Finishing a half-done move: conditional, like the move itself, so that one of the two wins.
FINISH_MOVE = (
    "UPDATE tasks SET state = ?, due_ms = ?, updated_ms = ? WHERE namespace = ? AND task_id = ?"
    " IF state = ? AND attempt = ? AND due_ms = ?"
)
SELECT_CURSOR = "SELECT second, epoch FROM cursors WHERE ring = 0 AND shard = ?"
SELECT_CURSORS = "SELECT shard, second, epoch FROM cursors WHERE ring = 0"
MOVE_CURSOR = "UPDATE cursors SET second = ?, epoch = ? WHERE ring = 0 AND shard = ? IF epoch = ?"
INSERT_DEAD = (
    "INSERT INTO dead_letters (namespace, day, updated_ms, task_id, queue) VALUES (?, ?, ?, ?, ?)"
    " USING TTL ?"
)
DELETE_DEAD = (
    "DELETE FROM dead_letters WHERE namespace = ? AND day = ? AND updated_ms = ? AND task_id = ?"
)
SELECT_DEAD = (
    "SELECT updated_ms, task_id, queue FROM dead_letters WHERE namespace = ? AND day = ?"
    " AND (updated_ms, task_id) < (?, ?) LIMIT ?"
)
_DAY_MS = 86_400_000
_MAX_TTL_S = 630_720_000  # Cassandra's ceiling (20 years)
# Concurrent requests per bulk operation: enough to keep a node busy, bounded for memory.
_WINDOW = 256


def _ttl_after(due_ms: int, now_ms: int, retention_s: int) -> int:
    return max(1, min(_MAX_TTL_S, (max(due_ms - now_ms, 0) // 1000) + retention_s))


def _success_params(e: DueEntry, now_ms: int) -> list[Any]:
    return [
        _ttl_with_row(e.due_ms, now_ms), int(TaskState.SUCCEEDED), now_ms, e.namespace,
        e.task_id, int(TaskState.DISPATCHED), e.attempt, e.due_ms,
    ]  # fmt: skip


def _ttl_with_row(due_ms: int, now_ms: int) -> int:
    """The TTL that ends a cell written now no later than the task row written for
    ``due_ms`` (a late run must not leave cells alive after the row's others expired)."""
    return max(1, min(_MAX_TTL_S, (due_ms - now_ms) // 1000 + TASK_RETENTION_S))


def _listing_write(t: Task, ttl: int) -> tuple[str, list[Any]]:
    return INSERT_BY_QUEUE, [t.namespace, t.queue, t.shard, t.task_id, ttl]


def task_values(t: Task) -> list[Any]:
    r = t.retry
    return [
        t.namespace, t.task_id, t.queue, t.handler, t.payload, dict(t.labels), r.max_attempts,
        r.initial_backoff_ms, r.multiplier, r.max_backoff_ms, r.jitter, int(t.state), t.attempt,
        t.due_ms, t.scheduled_ms, t.created_ms, t.updated_ms, t.shard, t.fingerprint,
        t.last_error_type, t.last_error_message, dict(t.trace_context), t.schedule_id,
        t.start_timeout_ms,
    ]  # fmt: skip


def _task_from_row(row: Any) -> Task:
    return Task(
        namespace=row.namespace, task_id=row.task_id, queue=row.queue, handler=row.handler,
        payload=bytes(row.payload or b""), labels=dict(row.labels or {}),
        retry=RetryPolicy(row.max_attempts, row.initial_backoff_ms, row.multiplier,
                          row.max_backoff_ms, row.jitter),
        state=TaskState(row.state), attempt=row.attempt, due_ms=row.due_ms,
        scheduled_ms=row.scheduled_ms, created_ms=row.created_ms, updated_ms=row.updated_ms,
        shard=row.shard, fingerprint=row.fingerprint, last_error_type=row.last_error_type or "",
        last_error_message=row.last_error_message or "",
        trace_context=dict(row.trace_context or {}), schedule_id=row.schedule_id or "",
        start_timeout_ms=row.start_timeout_ms or 0,
    )  # fmt: skip


def _entry_from_row(row: Any) -> DueEntry:
    return DueEntry(
        shard=row.shard, due_ms=row.due_ms, namespace=row.namespace, task_id=row.task_id,
        attempt=row.attempt, queue=row.queue, handler=row.handler,
        payload=bytes(row.payload or b""), labels=dict(row.labels or {}),
        max_attempts=row.max_attempts, scheduled_ms=row.scheduled_ms,
        trace_context=dict(row.trace_context or {}), schedule_id=row.schedule_id or "",
        start_timeout_ms=row.start_timeout_ms or 0, handed_off=row.handed_off_ms == row.due_ms,
    )  # fmt: skip


def due_values(e: DueEntry, now_ms: int) -> list[Any]:
    return [
        minute_of_second(e.second), e.second, e.key, e.shard, e.due_ms, e.namespace, e.task_id,
        e.attempt, e.queue, e.handler, e.payload, dict(e.labels), e.max_attempts,
        e.scheduled_ms, dict(e.trace_context), e.schedule_id, e.start_timeout_ms,
        _ttl_after(e.due_ms, now_ms, DUE_RETENTION_S),
    ]  # fmt: skip


class CassandraTaskStore:
    """``TaskStore`` on a keyspace; ``session`` may be shared with the other backends of the
    keyspace (``start``/``close`` count its users)."""

    def __init__(
        self, session: CassandraSession, shard_count: int, *, cancel_fence_ms: int = 2_000
    ) -> None:
        self._db = session
        self._shard_count = shard_count
        self.cancel_fence_ms = cancel_fence_ms

    @property
    def shard_count(self) -> int:
        return self._shard_count

    @property
    def session(self) -> CassandraSession:
        """The keyspace's session, shared by the schedule store of the same keyspace."""
        return self._db

    async def start(self) -> None:
        await self._db.start()

    async def create(self, task: Task) -> tuple[Task, bool]:
        [outcome] = await self.create_many([task])
        if isinstance(outcome, TikkError):
            raise outcome
        return outcome

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        """Task rows first, each in its own partition, all in flight at once; then the rows
        that point at them (due index, listing) in one unlogged batch per partition. A
        dispatcher that read a due row whose task it could not find yet would take it for a
        stale row and drop it, so no pointer is written before its task row is durable."""
        if new_ids:
            rows = [self._db.bind(CREATE_NEW_TASK, [*task_values(t), _task_ttl(t)]) for t in tasks]
            await self._db.execute_many(rows)
            await self._write_pointers(tasks)
            await count_usage(self._db, [(t.namespace, 1) for t in tasks])
            return [(t, True) for t in tasks]
        inserts = [self._db.bind(CREATE_TASK, [*task_values(t), _task_ttl(t)]) for t in tasks]
        answers = await self._db.execute_many(inserts)
        outcomes = [_create_outcome(t, rows) for t, rows in zip(tasks, answers, strict=True)]
        unfinished = [o.task for o in outcomes if isinstance(o, _Unfinished)]
        await self._write_pointers(unfinished)
        await self._db.execute_many([
            self._db.bind(COMPLETE_CREATE, [_task_ttl(t), t.namespace, t.task_id])
            for t in unfinished
        ])  # fmt: skip
        # Counted after the completion mark: a create found half-written was never counted
        # by the try that died, so it is counted here, with the new ones.
        await count_usage(self._db, [(t.namespace, 1) for t in unfinished])
        return [o.outcome() if isinstance(o, _Unfinished) else o for o in outcomes]

    async def _write_pointers(self, tasks: Sequence[Task]) -> None:
        """The due-index and listing rows of new tasks, batched by partition."""
        rows: list[PartitionRow] = []
        for t in tasks:
            entry = t.entry()
            due = (t.shard, minute_of_second(entry.second))
            due_row = due_values(entry, t.created_ms)
            rows.append(PartitionRow(("due", *due), INSERT_DUE, due_row, _row_bytes(t)))
            cql, params = _listing_write(t, _task_ttl(t))
            rows.append(PartitionRow(("listing", t.namespace, t.queue, t.shard), cql, params, 64))
        await self._db.execute_many(self._db.partition_batches(rows))

    async def get(self, namespace: str, task_id: str) -> Task:
        rows = await self._db.execute(SELECT_TASK, [namespace, task_id])
        # A row whose state expired (its last cells outlive the others by under a second)
        # is gone too.
        if not rows or _half_written(rows[0]) or rows[0].state is None:
            raise NotFound(f"task {task_id!r} not found in namespace {namespace!r}")
        return _task_from_row(rows[0])

    async def check_shard_count(self) -> None:
        rows = await self._db.execute(INIT_META, ["shard_count", str(self._shard_count)])
        if rows and not rows[0][0]:
            check_shard_count(int(rows[0].value), self._shard_count)

    async def cancel(self, namespace: str, task_id: str, now_ms: int) -> Task:
        task = await self.get(namespace, task_id)
        if task.state is TaskState.CANCELLED:
            return task
        if task.state is not TaskState.SCHEDULED:
            raise FailedPrecondition(
                f"task {task_id!r} is {task.state.name.lower()} and can no longer be cancelled"
            )
        if task.due_ms - now_ms < self.cancel_fence_ms:
            raise FailedPrecondition(
                f"task {task_id!r} is due within {self.cancel_fence_ms} ms and may already be "
                "dispatched; it can no longer be cancelled"
            )
        await self._db.execute(SET_STATE, [int(TaskState.CANCELLED), now_ms, namespace, task_id])
        await count_usage(self._db, [(namespace, -1)])
        second = second_of(task.due_ms)
        key = task_key(namespace, task_id)
        await self._db.execute(DELETE_DUE, [task.shard, minute_of_second(second), second, key])
        return task.evolve(state=TaskState.CANCELLED, updated_ms=now_ms)

    async def list_tasks(
        self, namespace: str, queue: str, state: TaskState | None, page_size: int, page_token: str
    ) -> Page[Task]:
        after = decode_token(page_token, (int, str))
        shard, last = (int(after[0]), str(after[1])) if after else (0, "")
        found: list[Task] = []
        while shard < self._shard_count and len(found) < page_size:
            params = [namespace, queue, shard, last, page_size]
            rows = await self._db.execute(SELECT_BY_QUEUE, params)
            ids = [r.task_id for r in rows]
            for tid, task in zip(ids, await self._get_many(namespace, ids), strict=True):
                last = tid
                if task is not None and (state is None or task.state is state):
                    found.append(task)
                if len(found) == page_size:
                    break
            if len(found) < page_size and len(rows) < page_size:
                shard, last = shard + 1, ""  # this shard's listing is exhausted
        more = shard < self._shard_count
        return Page(found, encode_token(shard, last) if more else "")

    async def _get_many(self, namespace: str, ids: Sequence[str]) -> list[Task | None]:
        async def one(tid: str) -> Task | None:
            try:
                return await self.get(namespace, tid)
            except NotFound:
                return None

        return list(await asyncio.gather(*(one(t) for t in ids)))

    async def list_dead_letters(
        self, namespace: str, queue: str, page_size: int, page_token: str, now_ms: int
    ) -> Page[Task]:
        after = decode_token(page_token, (int, int, str))
        day, before_ms, before_id = (
            (int(after[0]), int(after[1]), str(after[2]))
            if after
            else (now_ms // _DAY_MS, 2**62, "")
        )
        oldest = now_ms // _DAY_MS - TASK_RETENTION_S * 1000 // _DAY_MS
        found: list[Task] = []
        while day >= oldest and len(found) < page_size:
            params = [namespace, day, before_ms, before_id, page_size]
            rows = await self._db.execute(SELECT_DEAD, params)
            tasks = await self._get_many(namespace, [r.task_id for r in rows])
            for row, task in zip(rows, tasks, strict=True):
                before_ms, before_id = row.updated_ms, row.task_id
                if task is not None and _still_dead(task, row.updated_ms, queue):
                    found.append(task)
                if len(found) == page_size:
                    break
            if len(rows) < page_size and len(found) < page_size:
                day, before_ms, before_id = day - 1, 2**62, ""
        more = len(found) == page_size
        return Page(found, encode_token(day, before_ms, before_id) if more else "")

    async def read_due(
        self, shard: int, after: tuple[int, str], until_second: int, limit: int
    ) -> list[DueEntry]:
        after_second, after_key = after
        out: list[DueEntry] = []
        for minute in minutes_between(after_second, until_second):
            rows = await self._db.execute(
                SELECT_DUE,
                [shard, minute, after_second, after_key, until_second + 1, "", limit - len(out)],
            )
            # A row whose mark outlived it (TTL, delete) has no due time: not a row to fire.
            out += [_entry_from_row(r) for r in rows if r.due_ms is not None]
            if len(out) >= limit:
                break
        return out

    async def mark_dispatched(self, entries: Sequence[DueEntry], now_ms: int) -> Claimed:
        # Every task row read at once, then every claim written at once; only a half-done
        # move (rare) takes the slow path of its own.
        reads = [self._db.bind(SELECT_TASK, [e.namespace, e.task_id]) for e in entries]
        found = await self._db.execute_many(reads)
        states: list[TaskState | None] = []
        writes: list[Any] = []
        unfinished: list[DueEntry] = []
        for e, rows in zip(entries, found, strict=True):
            claim = _claimable(e, rows[0] if rows else None)
            if claim == "moving":
                claim = await self._claim(e, now_ms)
            elif claim is TaskState.SCHEDULED:
                writes.append(self._db.bind(CLAIM_DISPATCH, _claim_params(e, rows[0], now_ms)))
            if claim == "unfinished":
                unfinished.append(e)
                claim = None
            elif claim is not None and e.start_timeout_ms:
                writes.append(self._db.bind(INSERT_DUE, due_values(e.start_deadline(), now_ms)))
            states.append(claim)
        await self._db.execute_many(writes)
        ready = [e for e, state in zip(entries, states, strict=True) if state is not None]
        resent = sum(state is TaskState.DISPATCHED for state in states)
        return Claimed(ready, resent, unfinished)

    async def _claim(self, e: DueEntry, now_ms: int) -> TaskState | Literal["unfinished"] | None:
        """Claim the task of row ``e`` (SCHEDULED → DISPATCHED) on its own; the state it was
        in, or None if the row does not fire it (see ``_claimable``)."""
        for _ in range(2):
            rows = await self._db.execute(SELECT_TASK, [e.namespace, e.task_id])
            state = _claimable(e, rows[0] if rows else None)
            if state != "moving":
                if state is TaskState.SCHEDULED:
                    await self._db.execute(CLAIM_DISPATCH, _claim_params(e, rows[0], now_ms))
                return state
            t = rows[0]
            # A move half done (``move_due`` writes the new row before the task row): finish
            # it, or the task would be left with no row to fire it. The server may be
            # finishing it at the same moment; if it won, read again and claim as usual.
            done = await self._db.execute(FINISH_MOVE, [
                int(TaskState.DISPATCHED), e.due_ms, now_ms, e.namespace, e.task_id,
                int(TaskState.SCHEDULED), e.attempt, t.due_ms,
            ])  # fmt: skip
            if done and done[0][0]:
                return TaskState.SCHEDULED
        return None

    async def claim_start(self, entry: DueEntry, now_ms: int) -> bool:
        return await self._claim_start(entry, "started", now_ms)

    async def expire_start(self, entry: DueEntry, reason: str, now_ms: int) -> Task | None:
        if not await self._claim_start(entry, "expired", now_ms):
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

    async def _claim_start(self, e: DueEntry, claim: str, now_ms: int) -> bool:
        """One lightweight transaction decides an attempt's start; whether ``claim`` won.
        (The due time is part of the key: a re-drive starts at attempt 1 again.)"""
        params = [e.namespace, e.task_id, e.attempt, e.due_ms, claim, now_ms, TASK_RETENTION_S]
        rows = await self._db.execute(CLAIM_START, params)
        return bool(rows[0][0]) or rows[0].claim == claim

    async def mark_handed_off(self, entries: Sequence[DueEntry], now_ms: int) -> None:
        # One unlogged batch per due-index partition: a single round trip for its rows.
        partitions: dict[tuple[int, int], list[tuple[str, list[Any]]]] = {}
        for e in entries:
            minute = minute_of_second(e.second)
            ttl = _ttl_after(e.due_ms, now_ms, DUE_RETENTION_S)
            partitions.setdefault((e.shard, minute), []).append(
                (HAND_OFF, [ttl, e.due_ms, e.shard, minute, e.second, e.key])
            )
        await asyncio.gather(
            *(self._db.execute_batch(items, logged=False) for items in partitions.values())
        )

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
            await count_usage(self._db, [(namespace, -1)])
        await self._write_finished(updated, now_ms)
        return updated

    async def _update_if(self, new: Task, read: Task, now_ms: int) -> bool:
        """Write ``new`` over the task row if it is still in the state ``read`` saw."""
        ttl = _ttl_after(new.due_ms, now_ms, TASK_RETENTION_S)
        rows = await self._db.execute(UPDATE_TASK_IF, [
            ttl, *task_values(new)[2:], new.namespace, new.task_id,
            int(read.state), read.attempt, read.due_ms,
        ])  # fmt: skip
        return bool(rows and rows[0][0])

    async def _write_finished(self, t: Task, now_ms: int) -> None:
        """The rows of other partitions that a finished attempt needs: the retry's due row,
        or the dead-letter listing. Written after the task row, so a report repeated after a
        crash in between writes them again (``_heal_finished``)."""
        if t.state is TaskState.SCHEDULED:
            await self._db.execute(INSERT_DUE, due_values(t.entry(), now_ms))
        elif t.state is TaskState.DEAD_LETTERED:
            day = t.updated_ms // _DAY_MS
            dead = [t.namespace, day, t.updated_ms, t.task_id, t.queue, TASK_RETENTION_S]
            await self._db.execute(INSERT_DEAD, dead)

    async def _heal_finished(self, task: Task, attempt: int, now_ms: int) -> None:
        """A repeated report of ``attempt`` finds the task moved on already: if that was by
        this attempt's report, write its other rows again (idempotent), in case the process
        that moved it died before it wrote them."""
        retried = task.state is TaskState.SCHEDULED and task.attempt == attempt + 1
        dead = task.state is TaskState.DEAD_LETTERED and task.attempt == attempt
        if retried or dead:
            await self._write_finished(task, now_ms)

    async def succeed_many(self, entries: Sequence[DueEntry], now_ms: int) -> list[bool]:
        writes = [self._db.bind(SUCCEED_IF, _success_params(e, now_ms)) for e in entries]
        done = [bool(rows and rows[0][0]) for rows in await self._db.execute_many(writes)]
        finished = [(e.namespace, -1) for e, ok in zip(entries, done, strict=True) if ok]
        await count_usage(self._db, finished)
        return done

    async def redrive(self, namespace: str, task_id: str, now_ms: int) -> Task:
        task = await self.get(namespace, task_id)
        if task.state is not TaskState.DEAD_LETTERED:
            raise FailedPrecondition(
                f"task {task_id!r} is {task.state.name.lower()}, not dead-lettered"
            )
        again = task.evolve(state=TaskState.SCHEDULED, attempt=1, due_ms=now_ms, updated_ms=now_ms)
        # The task row first (and only from the state read: two re-drives move it once), then
        # the rows that point at it, for the reason given in create_many.
        if not await self._update_if(again, task, now_ms):
            raise FailedPrecondition(f"task {task_id!r} changed while it was re-driven; retry")
        await count_usage(self._db, [(namespace, 1)])
        ttl = _ttl_after(again.due_ms, now_ms, TASK_RETENTION_S)
        await self._db.execute_batch([
            (INSERT_DUE, due_values(again.entry(), now_ms)),
            _listing_write(again, ttl),
            (DELETE_DEAD, [namespace, task.updated_ms // _DAY_MS, task.updated_ms, task_id]),
        ])  # fmt: skip
        return again

    async def move_due(
        self, namespace: str, task_id: str, *, attempt: int, due_ms: int, to_ms: int, now_ms: int
    ) -> Task | None:
        task = await self.get(namespace, task_id)
        if (task.state, task.attempt, task.due_ms) != (TaskState.SCHEDULED, attempt, due_ms):
            return None
        moved = task.evolve(due_ms=to_ms, updated_ms=now_ms)
        # The new row first, so that a crash at any point leaves a row that fires the task: a
        # dispatcher that reads it before the task row has moved finishes the move itself
        # (``mark_dispatched``); if the task row then refuses (a dispatcher took the task
        # at its old time), the new row is a stray that no longer matches the task.
        await self._db.execute(INSERT_DUE, due_values(moved.entry(), now_ms))
        if not await self._update_if(moved, task, now_ms):
            return None
        second = second_of(due_ms)
        if second_of(to_ms) != second:
            old_row = [task.shard, minute_of_second(second), second, task_key(namespace, task_id)]
            await self._db.execute(DELETE_DUE, old_row)
        return moved

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


@dataclass(frozen=True)
class _Unfinished:
    """A create whose task row is written (now, or by an earlier try that died before its
    other rows): its pointers and completion mark are still to write."""

    task: Task
    created: bool

    def outcome(self) -> tuple[Task, bool]:
        return self.task, self.created


def _create_outcome(task: Task, rows: list[Any]) -> tuple[Task, bool] | TikkError | _Unfinished:
    """What the conditional insert of ``task`` found: nothing (created), the same task (done,
    or half-written by an interrupted try of the same create), or another task."""
    if not rows or rows[0][0]:
        return _Unfinished(task, True)
    existing = _task_from_row(rows[0])
    half = _half_written(rows[0])
    if existing.fingerprint != task.fingerprint:
        by = " by a create that was interrupted" if half else ""
        return AlreadyExists(
            f"task {task.task_id!r} already exists in namespace {task.namespace!r} with "
            f"different content{by}"
        )
    return _Unfinished(existing, False) if half else (existing, False)


def _task_ttl(t: Task) -> int:
    return _ttl_after(t.due_ms, t.created_ms, TASK_RETENTION_S)


def _row_bytes(t: Task) -> int:
    """About what a task's due row weighs in a batch (fixed columns plus the variable ones)."""
    labels = sum(len(k) + len(v) for k, v in t.labels.items())
    trace = sum(len(k) + len(v) for k, v in t.trace_context.items())
    variable = len(t.task_id) * 2 + len(t.queue) + len(t.handler) + len(t.schedule_id)
    return 160 + len(t.payload) + labels + trace + variable


def _claimable(e: DueEntry, t: Any) -> TaskState | Literal["moving", "unfinished"] | None:
    """What the task row ``t`` says of firing the due row ``e``: SCHEDULED (claim it),
    DISPATCHED (already claimed: send again), "moving" (a move to this row is half done),
    "unfinished" (its create has not written its completion mark yet: not now), or None
    (the row is stale)."""
    if t is None:
        return None
    # Until the mark, the task is invisible to every read, so a worker's report of it would
    # find nothing. The mark usually follows within milliseconds and a rescan finds the row
    # again; a create that died before it is completed by the client's retry, which places
    # the row again if it is late by then (``server.late_writes``).
    if _half_written(t):
        return "unfinished"
    if t.attempt != e.attempt:
        return None
    if t.state == TaskState.DISPATCHED:
        return TaskState.DISPATCHED if t.due_ms == e.due_ms else None
    if t.state != TaskState.SCHEDULED or t.due_ms > e.due_ms:
        return None
    return TaskState.SCHEDULED if t.due_ms == e.due_ms else "moving"


def _claim_params(e: DueEntry, read: Any, now_ms: int) -> list[Any]:
    """The parameters of ``CLAIM_DISPATCH`` for the task row ``read`` (scheduled)."""
    return [read.state_written + 1, int(TaskState.DISPATCHED), now_ms, e.namespace, e.task_id]


def _half_written(row: Any) -> bool:
    """A task row whose create never finished its second write (see ``CREATE_TASK``)."""
    return bool(row.create_pending) and not row.create_done


def _still_dead(task: Task, listed_ms: int, queue: str) -> bool:
    """A dead-letter row is current if the task is still dead-lettered by that transition."""
    return (
        task.state is TaskState.DEAD_LETTERED
        and task.updated_ms == listed_ms
        and (not queue or task.queue == queue)
    )


def _cursor_write(shard: int, move: Cursor, current: Cursor | None) -> tuple[str, list[Any]]:
    """A fenced write: it applies only if the row is still what was read."""
    if current is None:
        return INIT_CURSOR, [shard, move.second, move.epoch]
    second = max(move.second, current.second)
    return MOVE_CURSOR, [second, move.epoch, shard, current.epoch]
