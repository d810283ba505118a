"""Embedded credential store: a table in the task store's SQLite file; semantics in
``tikk.store.credentials``. The table is created when the store opens the file."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from tikk.credentials import Credential, Grant
from tikk.drivers.sqlite import SqliteRunner, Transaction
from tikk.errors import AlreadyExists, FailedPrecondition, NotFound

CREDENTIALS_SCHEMA = """
CREATE TABLE IF NOT EXISTS credentials (
    credential_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    salt BLOB NOT NULL,
    secret_hash BLOB NOT NULL,
    grants TEXT NOT NULL,
    subject TEXT NOT NULL DEFAULT '',
    created_ms INTEGER NOT NULL,
    revoked_ms INTEGER,
    rotated_ms INTEGER
);
"""
_COLUMNS = (
    "credential_id, name, salt, secret_hash, grants, subject, created_ms, revoked_ms, rotated_ms"
)


def _decode(row: Sequence[Any]) -> Credential:
    return Credential(
        credential_id=row[0],
        name=row[1],
        salt=bytes(row[2]),
        secret_hash=bytes(row[3]),
        grants=tuple(Grant.parse(g) for g in json.loads(row[4])),
        subject=row[5],
        created_ms=row[6],
        revoked_ms=row[7],
        rotated_ms=row[8],
    )


def _fetch(conn: sqlite3.Connection, credential_id: str) -> Credential:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM credentials WHERE credential_id=?", (credential_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"credential {credential_id!r} not found")
    return _decode(row)


class SqliteCredentialStore:
    """``CredentialStore`` on the SQLite file of ``SqliteTaskStore`` (same path)."""

    def __init__(self, path: str) -> None:
        self._db = SqliteRunner(path, CREDENTIALS_SCHEMA)

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()

    async def create(self, credential: Credential) -> None:
        c = credential
        values = (
            c.credential_id, c.name, c.salt, c.secret_hash,
            json.dumps([str(g) for g in c.grants]), c.subject, c.created_ms, c.revoked_ms,
            c.rotated_ms,
        )  # fmt: skip

        def work(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(f"INSERT INTO credentials ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                             values)  # fmt: skip
            except sqlite3.IntegrityError:
                raise AlreadyExists(f"credential {c.credential_id!r} already exists") from None

        await self._db.run(work)

    async def get(self, credential_id: str) -> Credential:
        return await self._db.run(lambda conn: _fetch(conn, credential_id))

    async def list_all(self) -> Sequence[Credential]:
        rows = await self._db.run(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM credentials ORDER BY credential_id"
            ).fetchall()
        )
        return [_decode(r) for r in rows]

    async def revoke(self, credential_id: str, now_ms: int) -> Credential:
        def work(conn: sqlite3.Connection) -> Credential:
            with Transaction(conn):
                conn.execute(
                    "UPDATE credentials SET revoked_ms=? WHERE credential_id=?"
                    " AND revoked_ms IS NULL",
                    (now_ms, credential_id),
                )
                return _fetch(conn, credential_id)

        return await self._db.run(work)

    async def rotate(
        self, credential_id: str, salt: bytes, secret_hash: bytes, now_ms: int
    ) -> Credential:
        def work(conn: sqlite3.Connection) -> Credential:
            with Transaction(conn):
                if _fetch(conn, credential_id).revoked:
                    raise FailedPrecondition(f"credential {credential_id!r} is revoked")
                conn.execute(
                    "UPDATE credentials SET salt=?, secret_hash=?, rotated_ms=?"
                    " WHERE credential_id=?",
                    (salt, secret_hash, now_ms, credential_id),
                )
                return _fetch(conn, credential_id)

        return await self._db.run(work)
