"""Bulk actions on Cassandra; semantics in ``tikk.store.bulk_actions``.

Tables (``schema`` step 13): ``bulk_actions``, one partition per namespace (an operator's
actions are few) clustered by id, last first, each row written by lightweight transactions
(insert if absent, update if at the version read); and ``bulk_actions_running``, one small
partition listing the actions still running, which every server reads to resume them. An
action's running row is written before the action and deleted once it ended, so a crash in
between leaves a running row without an action (skipped) or one of an ended action (deleted
when next read), never a running action nobody lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tikk.bulk_actions import BulkAction, BulkState, decode_action, encode_action
from tikk.drivers.cassandra import CassandraSession
from tikk.errors import NotFound
from tikk.model import Page
from tikk.paging import decode_token, encode_token

_COLUMNS = "namespace, action_id, version, state, body"
INSERT_ACTION = f"INSERT INTO bulk_actions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
SELECT_ACTION = f"SELECT {_COLUMNS} FROM bulk_actions WHERE namespace = ? AND action_id = ?"
SELECT_ACTIONS = (
    f"SELECT {_COLUMNS} FROM bulk_actions WHERE namespace = ? AND action_id < ? LIMIT ?"
)
UPDATE_ACTION = (
    "UPDATE bulk_actions SET version = ?, state = ?, body = ?"
    " WHERE namespace = ? AND action_id = ? IF version = ?"
)
INSERT_RUNNING = "INSERT INTO bulk_actions_running (ring, namespace, action_id) VALUES (0, ?, ?)"
DELETE_RUNNING = (
    "DELETE FROM bulk_actions_running WHERE ring = 0 AND namespace = ? AND action_id = ?"
)
SELECT_RUNNING = "SELECT namespace, action_id FROM bulk_actions_running WHERE ring = 0 LIMIT ?"
_TOP = "\U0010ffff"


def _action(row: Any) -> BulkAction:
    return decode_action(row.namespace, row.action_id, row.version, row.state, row.body)


class CassandraBulkActionStore:
    """``BulkActionStore`` on a keyspace; ``session`` may be shared with the other backends of
    the keyspace (``start``/``close`` count its users)."""

    def __init__(self, session: CassandraSession) -> None:
        self._db = session

    async def create(self, action: BulkAction) -> tuple[BulkAction, bool]:
        a = action
        await self._db.execute(INSERT_RUNNING, [a.namespace, a.action_id])
        params = [a.namespace, a.action_id, a.version, int(a.state), encode_action(a)]
        rows = await self._db.execute(INSERT_ACTION, params)
        if rows and not rows[0][0]:  # one exists: what it holds came back
            return _action(rows[0]), False
        return a, True

    async def get(self, namespace: str, action_id: str) -> BulkAction:
        rows = await self._db.execute(SELECT_ACTION, [namespace, action_id])
        if not rows:
            raise NotFound(f"bulk action {action_id!r} not found in namespace {namespace!r}")
        return _action(rows[0])

    async def list(self, namespace: str, page_size: int, page_token: str) -> Page[BulkAction]:
        after = decode_token(page_token, (str,))
        params = [namespace, str(after[0]) if after else _TOP, page_size + 1]
        rows = await self._db.execute(SELECT_ACTIONS, params)
        found = [_action(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return Page(found, encode_token(found[-1].action_id) if more else "")

    async def running(self, limit: int) -> Sequence[BulkAction]:
        listed = await self._db.execute(SELECT_RUNNING, [limit])
        answers = await self._db.execute_many(
            [self._db.bind(SELECT_ACTION, [r.namespace, r.action_id]) for r in listed]
        )
        found = [_action(rows[0]) for rows in answers if rows]
        ended = [a for a in found if a.state is not BulkState.RUNNING]
        await self._db.execute_many(
            [self._db.bind(DELETE_RUNNING, [a.namespace, a.action_id]) for a in ended]
        )
        return [a for a in found if a.state is BulkState.RUNNING]

    async def replace(self, action: BulkAction) -> bool:
        a = action
        params = [
            a.version,
            int(a.state),
            encode_action(a),
            a.namespace,
            a.action_id,
            a.version - 1,
        ]
        rows = await self._db.execute(UPDATE_ACTION, params)
        written = bool(rows and rows[0][0])
        if written and a.state is not BulkState.RUNNING:
            await self._db.execute(DELETE_RUNNING, [a.namespace, a.action_id])
        return written

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()
