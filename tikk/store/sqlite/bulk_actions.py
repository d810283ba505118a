"""Bulk actions on SQLite, in the task store's file; semantics in ``tikk.store.bulk_actions``."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from tikk.bulk_actions import BulkAction, BulkState, decode_action, encode_action
from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.errors import NotFound
from tikk.model import Page
from tikk.paging import decode_token, encode_token

BULK_ACTIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS bulk_actions (
    namespace TEXT NOT NULL,
    action_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    state INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (namespace, action_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS bulk_actions_by_state ON bulk_actions (state);
"""
_COLUMNS = "namespace, action_id, version, state, body"
_GET = f"SELECT {_COLUMNS} FROM bulk_actions WHERE namespace = ? AND action_id = ?"
_LIST = (
    f"SELECT {_COLUMNS} FROM bulk_actions WHERE namespace = ? AND action_id < ?"
    " ORDER BY action_id DESC LIMIT ?"
)
_RUNNING = f"SELECT {_COLUMNS} FROM bulk_actions WHERE state = ? LIMIT ?"
_REPLACE = (
    "UPDATE bulk_actions SET version = ?, state = ?, body = ?"
    " WHERE namespace = ? AND action_id = ? AND version = ?"
)
_TOP = "\U0010ffff"


def _action(row: Any) -> BulkAction:
    ns, action_id, version, state, body = row
    return decode_action(str(ns), str(action_id), int(version), int(state), str(body))


class SqliteBulkActionStore:
    """``BulkActionStore`` on the task store's SQLite file (``sqlite:///path``)."""

    def __init__(self, path: str) -> None:
        self._db = SqliteRunner(path, BULK_ACTIONS_SCHEMA, {})

    async def create(self, action: BulkAction) -> tuple[BulkAction, bool]:
        a = action
        row = (a.namespace, a.action_id, a.version, int(a.state), encode_action(a))

        def work(conn: sqlite3.Connection) -> tuple[BulkAction, bool]:
            with Transaction(conn):
                found = conn.execute(_GET, (a.namespace, a.action_id)).fetchone()
                if found is not None:
                    return _action(found), False
                conn.execute(f"INSERT INTO bulk_actions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)", row)
                return a, True

        return await self._db.run(work)

    async def get(self, namespace: str, action_id: str) -> BulkAction:
        row = await self._db.run(lambda c: c.execute(_GET, (namespace, action_id)).fetchone())
        if row is None:
            raise NotFound(f"bulk action {action_id!r} not found in namespace {namespace!r}")
        return _action(row)

    async def list(self, namespace: str, page_size: int, page_token: str) -> Page[BulkAction]:
        after = decode_token(page_token, (str,))
        args = (namespace, str(after[0]) if after else _TOP, page_size + 1)
        rows = await self._db.run(lambda c: c.execute(_LIST, args).fetchall())
        found = [_action(r) for r in rows[:page_size]]
        more = len(rows) > page_size
        return Page(found, encode_token(found[-1].action_id) if more else "")

    async def running(self, limit: int) -> Sequence[BulkAction]:
        args = (int(BulkState.RUNNING), limit)
        return [
            _action(r) for r in await self._db.run(lambda c: c.execute(_RUNNING, args).fetchall())
        ]

    async def replace(self, action: BulkAction) -> bool:
        a = action
        args = (a.version, int(a.state), encode_action(a), a.namespace, a.action_id, a.version - 1)

        def work(conn: sqlite3.Connection) -> bool:
            with Transaction(conn):
                return conn.execute(_REPLACE, args).rowcount == 1

        return await self._db.run(work)

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()
