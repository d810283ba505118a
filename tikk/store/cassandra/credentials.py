"""Credential store on Cassandra; semantics in ``tikk.store.credentials``.

Table ``credentials`` (``tikk.store.cassandra.schema`` v7), one row per credential. Creation,
revocation and rotation are lightweight transactions, so two ``tikk auth`` commands racing on
one credential cannot undo each other (a rotation never revives a revoked credential). The
table is small and read whole by every server every few seconds; reads at the session's
quorum level see every conditional write that completed before them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from tikk.credentials import Credential, Grant
from tikk.drivers.cassandra import CassandraSession
from tikk.errors import AlreadyExists, BackendUnavailable, FailedPrecondition, NotFound

_COLS = (
    "credential_id, name, salt, secret_hash, grants, subject, created_ms, revoked_ms, rotated_ms"
)
CREATE_CREDENTIAL = (
    f"INSERT INTO credentials ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS"
)
SELECT_CREDENTIAL = f"SELECT {_COLS} FROM credentials WHERE credential_id = ?"
SELECT_CREDENTIALS = f"SELECT {_COLS} FROM credentials"
REVOKE_CREDENTIAL = (
    "UPDATE credentials SET revoked_ms = ? WHERE credential_id = ? IF revoked_ms = null"
)
ROTATE_CREDENTIAL = (
    "UPDATE credentials SET salt = ?, secret_hash = ?, rotated_ms = ? WHERE credential_id = ?"
    " IF revoked_ms = null"
)


def _decode(row: Any) -> Credential:
    return Credential(
        credential_id=row.credential_id,
        name=row.name,
        salt=bytes(row.salt),
        secret_hash=bytes(row.secret_hash),
        # Cassandra stores an empty list as null.
        grants=tuple(Grant.parse(g) for g in row.grants or ()),
        subject=row.subject or "",
        created_ms=row.created_ms,
        revoked_ms=row.revoked_ms,
        rotated_ms=row.rotated_ms,
    )


class CassandraCredentialStore:
    """``CredentialStore`` in the task store's keyspace."""

    def __init__(self, session: CassandraSession) -> None:
        self._db = session

    async def start(self) -> None:
        await self._db.start()
        try:
            # A keyspace migrated before v7 has no table: say so at start, not at a call.
            await asyncio.to_thread(self._db.prepare, SELECT_CREDENTIALS)
        except BackendUnavailable as exc:
            # Cassandra refused the statement itself (no such table): no retry mends that,
            # so it is not "unavailable", which a starting process would try again.
            refused = type(exc.__cause__).__name__ == "InvalidRequest"
            kind = FailedPrecondition if refused else BackendUnavailable
            raise kind(f"{exc} (the credentials table is missing? run `tikk migrate`)") from exc

    async def close(self) -> None:
        await self._db.close()

    async def create(self, credential: Credential) -> None:
        c = credential
        rows = await self._db.execute(CREATE_CREDENTIAL, [
            c.credential_id, c.name, c.salt, c.secret_hash, [str(g) for g in c.grants],
            c.subject, c.created_ms, c.revoked_ms, c.rotated_ms,
        ])  # fmt: skip
        if rows and not rows[0][0]:
            raise AlreadyExists(f"credential {c.credential_id!r} already exists")

    async def get(self, credential_id: str) -> Credential:
        rows = await self._db.execute(SELECT_CREDENTIAL, [credential_id])
        if not rows:
            raise NotFound(f"credential {credential_id!r} not found")
        return _decode(rows[0])

    async def list_all(self) -> Sequence[Credential]:
        rows = await self._db.execute(SELECT_CREDENTIALS)
        return sorted((_decode(r) for r in rows), key=lambda c: c.credential_id)

    async def revoke(self, credential_id: str, now_ms: int) -> Credential:
        await self.get(credential_id)  # NotFound first: the update below would create a row
        await self._db.execute(REVOKE_CREDENTIAL, [now_ms, credential_id])
        # Applied or not (already revoked), the stored row is the answer.
        return await self.get(credential_id)

    async def rotate(
        self, credential_id: str, salt: bytes, secret_hash: bytes, now_ms: int
    ) -> Credential:
        await self.get(credential_id)
        rows = await self._db.execute(ROTATE_CREDENTIAL, [salt, secret_hash, now_ms, credential_id])
        if rows and not rows[0][0]:
            raise FailedPrecondition(f"credential {credential_id!r} is revoked")
        return await self.get(credential_id)
