"""Schedule store on Cassandra; semantics in ``tikk.schedule_store``.

Tables (``tikk.cassandra_schema`` v4): ``schedules`` by (namespace, id) holding the version,
the fingerprint and the JSON document of ``tikk.schedule_codec``; ``schedules_by_namespace``
for listings (one partition per namespace, clustered by id).

Every write of a schedule row is a lightweight transaction on its version, so an update,
a pause and a dispatcher's step never overwrite each other. A step writes the occurrence tasks
(each ``IF NOT EXISTS``, through the task store) and the next tick *before* the conditional
update of the schedule: a crash between the two leaves the old tick in force (it is re-read and
the step replayed, creating nothing twice), never a schedule without a tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tikk import schedule_codec
from tikk.cassandra_store import INSERT_DUE, CassandraTaskStore, _due_values
from tikk.errors import AlreadyExists, Conflict, NotFound
from tikk.model import Page, Task
from tikk.paging import decode_token, encode_token
from tikk.schedule import Schedule

_COLS = "namespace, schedule_id, version, fingerprint, body"
CREATE_SCHEDULE = f"INSERT INTO schedules ({_COLS}) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
SELECT_SCHEDULE = f"SELECT {_COLS} FROM schedules WHERE namespace = ? AND schedule_id = ?"
REPLACE_SCHEDULE = (
    "UPDATE schedules SET version = ?, fingerprint = ?, body = ?"
    " WHERE namespace = ? AND schedule_id = ? IF version = ?"
)
DELETE_SCHEDULE = "DELETE FROM schedules WHERE namespace = ? AND schedule_id = ? IF version = ?"
DELETE_ANY_SCHEDULE = "DELETE FROM schedules WHERE namespace = ? AND schedule_id = ? IF EXISTS"
INSERT_LISTED = "INSERT INTO schedules_by_namespace (namespace, schedule_id) VALUES (?, ?)"
DELETE_LISTED = "DELETE FROM schedules_by_namespace WHERE namespace = ? AND schedule_id = ?"
SELECT_LISTED = (
    "SELECT schedule_id FROM schedules_by_namespace WHERE namespace = ? AND schedule_id > ? LIMIT ?"
)


def _decode(row: Any) -> Schedule:
    return schedule_codec.decode(row.namespace, row.schedule_id, row.version, row.body)


class CassandraScheduleStore:
    """``ScheduleStore`` in the task store's keyspace (same ``cassandra://`` URL)."""

    def __init__(self, url: str) -> None:
        # Occurrence tasks are created exactly as the task store creates tasks; the shard
        # count only matters to its listings, which this store does not use.
        self._tasks = CassandraTaskStore(url, shard_count=1)
        self._db = self._tasks.session

    async def connect(self) -> None:
        await self._tasks.connect()

    async def create(self, schedule: Schedule) -> tuple[Schedule, bool]:
        s = schedule.evolve(version=1)
        values = [s.namespace, s.schedule_id, 1, s.fingerprint, schedule_codec.encode(s)]
        rows = await self._db.execute(CREATE_SCHEDULE, values)
        created = bool(rows[0][0]) if rows else True
        if not created:
            existing = _decode(rows[0])
            if existing.fingerprint != s.fingerprint:
                raise AlreadyExists(
                    f"schedule {s.schedule_id!r} already exists in namespace {s.namespace!r} "
                    "with different content"
                )
            if existing.version != 1:
                return existing, False
            s = existing
        # Also on a repeated create of an untouched schedule: heals a create that died here.
        await self._write_tick(s)
        await self._db.execute(INSERT_LISTED, [s.namespace, s.schedule_id])
        return s, created

    async def get(self, namespace: str, schedule_id: str) -> Schedule:
        rows = await self._db.execute(SELECT_SCHEDULE, [namespace, schedule_id])
        if not rows:
            raise NotFound(f"schedule {schedule_id!r} not found in namespace {namespace!r}")
        return _decode(rows[0])

    async def list(self, namespace: str, page_size: int, page_token: str) -> Page[Schedule]:
        after = decode_token(page_token, (str,))
        last = str(after[0]) if after else ""
        found: list[Schedule] = []
        while len(found) < page_size:
            rows = await self._db.execute(SELECT_LISTED, [namespace, last, page_size])
            for row in rows:
                last = row.schedule_id
                try:
                    found.append(await self.get(namespace, last))
                except NotFound:
                    continue  # deleted between the listing write and this read
                if len(found) == page_size:
                    break
            if len(rows) < page_size:
                return Page(found)
        return Page(found, encode_token(found[-1].schedule_id))

    async def replace(self, schedule: Schedule, expected_version: int) -> Schedule:
        stored = schedule.evolve(version=expected_version + 1)
        if not await self._swap(stored, expected_version):
            current = await self.get(schedule.namespace, schedule.schedule_id)
            raise Conflict(
                f"schedule {schedule.schedule_id!r} is at version {current.version}, "
                f"not {expected_version}"
            )
        await self._write_tick(stored)
        return stored

    async def delete(self, namespace: str, schedule_id: str, expected_version: int | None) -> None:
        if expected_version is None:
            rows = await self._db.execute(DELETE_ANY_SCHEDULE, [namespace, schedule_id])
        else:
            rows = await self._db.execute(
                DELETE_SCHEDULE, [namespace, schedule_id, expected_version]
            )
        if rows and not rows[0][0]:
            if getattr(rows[0], "version", None) is None:
                raise NotFound(f"schedule {schedule_id!r} not found in namespace {namespace!r}")
            raise Conflict(
                f"schedule {schedule_id!r} is at version {rows[0].version}, not {expected_version}"
            )
        await self._db.execute(DELETE_LISTED, [namespace, schedule_id])

    async def step(self, schedule: Schedule, expected_version: int, tasks: Sequence[Task]) -> bool:
        for task in tasks:
            try:
                await self._tasks.create(task)
            except AlreadyExists:
                continue  # the occurrence has its task already (see SqliteScheduleStore)
        stored = schedule.evolve(version=expected_version + 1)
        await self._write_tick(stored)
        try:
            return await self._swap(stored, expected_version)
        except NotFound:
            return False

    async def _swap(self, s: Schedule, expected_version: int) -> bool:
        """The conditional write of the schedule row; False if missing or at another version."""
        values = [s.version, s.fingerprint, schedule_codec.encode(s), s.namespace, s.schedule_id,
                  expected_version]  # fmt: skip
        rows = await self._db.execute(REPLACE_SCHEDULE, values)
        if rows and not rows[0][0]:
            if getattr(rows[0], "version", None) is None:
                raise NotFound(f"schedule {s.schedule_id!r} not found in namespace {s.namespace!r}")
            return False
        return True

    async def _write_tick(self, s: Schedule) -> None:
        tick = s.tick()
        if tick is not None:
            await self._db.execute(INSERT_DUE, _due_values(tick, s.updated_ms))

    async def close(self) -> None:
        await self._tasks.close()
