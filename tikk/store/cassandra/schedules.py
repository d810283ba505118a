"""Schedule store on Cassandra; semantics in ``tikk.store.schedules``.

Tables (``tikk.store.cassandra.schema`` v4): ``schedules`` by (namespace, id) holding the version,
the fingerprint and the JSON document of ``tikk.schedules.codec``; ``schedules_by_namespace``
for listings, a namespace's ids spread over ``LISTING_SHARDS`` partitions (so no partition
grows with the namespace) and clustered by id. A page merges the shards in id order.

Every write of a schedule row is a lightweight transaction on its version, so an update,
a pause and a dispatcher's step never overwrite each other. The other rows are written around
it so that a crash between two writes leaves nothing a retry cannot complete:

- create: the schedule row (``IF NOT EXISTS``), then its listing row and its tick. A repeated
  create with the same content writes both again, which completes a create that died after
  its first write.
- step: the occurrence tasks (each ``IF NOT EXISTS``, through the task store) and the next
  tick *before* the conditional update of the schedule. A crash in between leaves the old
  tick in force (it is re-read and the step replayed, creating nothing twice), never a
  schedule without a tick.
- delete: the schedule row, then its listing row. A listing row left behind by a crash in
  between names a missing schedule and is skipped by ``list``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tikk.buckets import minute_of_second, shard_of
from tikk.drivers.cassandra import CassandraSession
from tikk.drivers.cassandra_batches import PartitionRow
from tikk.errors import AlreadyExists, Conflict, InvalidArgument, NotFound
from tikk.model import Page, Task
from tikk.paging import decode_token, encode_token
from tikk.schedules.codec import decode_schedule, encode_schedule
from tikk.schedules.model import Schedule
from tikk.store.cassandra.task_rows import INSERT_DUE, due_values
from tikk.store.cassandra.tasks import CassandraTaskStore
from tikk.store.schedules import StepWrite

# Partitions of a namespace's listing. Part of the stored layout: changing it strands
# existing listing rows.
LISTING_SHARDS = 16

_COLS = "namespace, schedule_id, version, fingerprint, body"
CREATE_SCHEDULE = f"INSERT INTO schedules ({_COLS}) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
SELECT_SCHEDULE = f"SELECT {_COLS} FROM schedules WHERE namespace = ? AND schedule_id = ?"
UPDATE_SCHEDULE = (
    "UPDATE schedules SET version = ?, body = ?, fingerprint = ?"
    " WHERE namespace = ? AND schedule_id = ? IF version = ?"
)
DELETE_SCHEDULE = "DELETE FROM schedules WHERE namespace = ? AND schedule_id = ? IF version = ?"
DELETE_ANY_SCHEDULE = "DELETE FROM schedules WHERE namespace = ? AND schedule_id = ? IF EXISTS"
INSERT_LISTED = (
    "INSERT INTO schedules_by_namespace (namespace, shard, schedule_id) VALUES (?, ?, ?)"
)
DELETE_LISTED = (
    "DELETE FROM schedules_by_namespace WHERE namespace = ? AND shard = ? AND schedule_id = ?"
)
SELECT_LISTED = (
    "SELECT schedule_id FROM schedules_by_namespace WHERE namespace = ? AND shard = ?"
    " AND schedule_id > ? LIMIT ?"
)


def listing_shard(namespace: str, schedule_id: str) -> int:
    """The listing partition of a schedule (stable across processes and hosts)."""
    return shard_of(namespace, schedule_id, LISTING_SHARDS)


def _decode(row: Any) -> Schedule:
    return decode_schedule(row.namespace, row.schedule_id, row.version, row.body)


def _not_found(namespace: str, schedule_id: str) -> NotFound:
    return NotFound(f"schedule {schedule_id!r} not found in namespace {namespace!r}")


def _refusal(rows: list[Any], namespace: str, schedule_id: str, expected: int | None) -> None:
    """Raise for a conditional write that was not applied; return if it was."""
    if not rows or rows[0][0]:
        return
    # A refused condition returns the row's current values; a missing row returns none.
    current = getattr(rows[0], "version", None)
    if current is None:
        raise _not_found(namespace, schedule_id)
    raise Conflict(f"schedule {schedule_id!r} is at version {current}, not {expected}")


class CassandraScheduleStore:
    """``ScheduleStore`` in the task store's keyspace, on the same (shared) session."""

    def __init__(self, session: CassandraSession) -> None:
        # Occurrence tasks are created exactly as the task store creates tasks. The shard
        # count only matters to the task store's listings, which this store does not read;
        # each task carries its own shard.
        self._tasks = CassandraTaskStore(session, shard_count=1)
        self._db = session

    async def start(self) -> None:
        await self._tasks.start()

    async def create(self, schedule: Schedule) -> tuple[Schedule, bool]:
        s = schedule.evolve(version=1)
        values = [s.namespace, s.schedule_id, 1, s.fingerprint, encode_schedule(s)]
        rows = await self._db.execute(CREATE_SCHEDULE, values)
        created = not rows or bool(rows[0][0])
        if not created:
            existing = _decode(rows[0])
            if existing.fingerprint != s.fingerprint:
                raise AlreadyExists(
                    f"schedule {s.schedule_id!r} already exists in namespace {s.namespace!r} "
                    "with different content"
                )
            # The tick of what is stored is the pending one, whatever its version: writing it
            # again is harmless, and completes a create that died before its next writes.
            s = existing
        await self._write_tick(s)
        await self._db.execute(
            INSERT_LISTED, [s.namespace, listing_shard(s.namespace, s.schedule_id), s.schedule_id]
        )
        return s, created

    async def get(self, namespace: str, schedule_id: str) -> Schedule:
        found = await self._find(namespace, schedule_id)
        if found is None:
            raise _not_found(namespace, schedule_id)
        return found

    async def _find(self, namespace: str, schedule_id: str) -> Schedule | None:
        rows = await self._db.execute(SELECT_SCHEDULE, [namespace, schedule_id])
        return _decode(rows[0]) if rows else None

    async def list(self, namespace: str, page_size: int, page_token: str) -> Page[Schedule]:
        if page_size < 1:
            raise InvalidArgument("page_size", "must be at least 1")
        after = decode_token(page_token, (str,))
        last = str(after[0]) if after else ""
        found: list[Schedule] = []
        while True:
            want = page_size - len(found)
            # The first ``want`` ids after ``last`` in the namespace are among the first
            # ``want`` of each shard; one more per shard tells whether anything follows.
            listed = await asyncio.gather(
                *(
                    self._db.execute(SELECT_LISTED, [namespace, shard, last, want + 1])
                    for shard in range(LISTING_SHARDS)
                )
            )
            ids = sorted(row.schedule_id for rows in listed for row in rows)
            batch = ids[:want]
            schedules = await asyncio.gather(*(self._find(namespace, sid) for sid in batch))
            # None: deleted, its listing row not (yet) removed.
            found += [s for s in schedules if s is not None]
            if len(ids) <= want:
                return Page(found)  # every shard is exhausted
            last = batch[-1]
            if len(found) == page_size:
                return Page(found, encode_token(last))

    async def replace(self, schedule: Schedule, expected_version: int) -> Schedule:
        stored = schedule.evolve(version=expected_version + 1)
        rows = await self._db.execute(UPDATE_SCHEDULE, _update_values(stored, expected_version))
        _refusal(rows, stored.namespace, stored.schedule_id, expected_version)
        await self._write_tick(stored)
        return stored

    async def delete(self, namespace: str, schedule_id: str, expected_version: int | None) -> None:
        if expected_version is None:
            rows = await self._db.execute(DELETE_ANY_SCHEDULE, [namespace, schedule_id])
        else:
            rows = await self._db.execute(
                DELETE_SCHEDULE, [namespace, schedule_id, expected_version]
            )
        _refusal(rows, namespace, schedule_id, expected_version)
        await self._db.execute(
            DELETE_LISTED, [namespace, listing_shard(namespace, schedule_id), schedule_id]
        )

    async def step(self, schedule: Schedule, expected_version: int, tasks: Sequence[Task]) -> bool:
        [done] = await self.step_many([StepWrite(schedule, expected_version, tasks)])
        return done

    async def get_many(self, keys: Sequence[tuple[str, str]]) -> Sequence[Schedule | None]:
        reads = [self._db.bind(SELECT_SCHEDULE, [ns, sid]) for ns, sid in keys]
        return [_decode(rows[0]) if rows else None for rows in await self._db.execute_many(reads)]

    async def step_many(self, steps: Sequence[StepWrite]) -> Sequence[bool]:
        """Each phase for every step at once (a herd of schedules due together is one write
        of tasks, one of ticks, one of schedules), in the order one step needs: the
        occurrences' tasks, the next tick, then the schedule, conditional on its version.
        AlreadyExists comes back as a value: the occurrence has its task already (created
        before the schedule was updated), which stays as it is. Other errors propagate."""
        await self._tasks.create_many([t for st in steps for t in st.tasks])
        stored = [st.schedule.evolve(version=st.expected_version + 1) for st in steps]
        await self._write_ticks(stored)
        updates = [
            self._db.bind(UPDATE_SCHEDULE, _update_values(s, st.expected_version))
            for s, st in zip(stored, steps, strict=True)
        ]
        return [not rows or bool(rows[0][0]) for rows in await self._db.execute_many(updates)]

    async def _write_ticks(self, schedules: Sequence[Schedule]) -> None:
        rows = []
        for s in schedules:
            tick = s.tick()
            if tick is not None:
                partition = ("due", tick.shard, minute_of_second(tick.second))
                values = due_values(tick, s.updated_ms)
                rows.append(PartitionRow(partition, INSERT_DUE, values, 300))
        await self._db.execute_many(self._db.partition_batches(rows))

    async def _write_tick(self, s: Schedule) -> None:
        await self._write_ticks([s])

    async def close(self) -> None:
        await self._tasks.close()


def _update_values(s: Schedule, expected_version: int) -> list[Any]:
    return [
        s.version, encode_schedule(s), s.fingerprint, s.namespace, s.schedule_id,
        expected_version,
    ]  # fmt: skip
