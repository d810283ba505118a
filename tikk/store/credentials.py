"""The credential store interface: the API's callers, kept in the task store's database.

Credentials are few (one per caller, not per request) and read whole: every server process
keeps an in-memory view and reloads it every few seconds (``server.auth.authenticator``), so a
revocation written by ``tikk auth revoke`` reaches every process within seconds without any
message between them. A credential is never deleted: a revoked one stays listed, with the time
it was revoked.

Backends: ``tikk.store.sqlite.credentials`` (a table in the task store's SQLite file) and
``tikk.store.cassandra.credentials`` (table ``credentials``, store migration 7). Every method
may raise ``BackendUnavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tikk.credentials import Credential


class CredentialStore(Protocol):
    """Durable home of credentials. Safe to share between coroutines of one event loop."""

    async def start(self) -> None:
        """Open the backend (SQLite: create the table). Idempotent."""
        ...

    async def close(self) -> None: ...

    async def create(self, credential: Credential) -> None:
        """Store a new credential. Raises ``AlreadyExists`` if its id is taken."""
        ...

    async def get(self, credential_id: str) -> Credential:
        """The credential, revoked or not; raises ``NotFound``."""
        ...

    async def list_all(self) -> Sequence[Credential]:
        """Every credential, revoked ones included, ordered by id. Reads are at least as
        fresh as every ``revoke`` and ``rotate`` that returned before the read began."""
        ...

    async def revoke(self, credential_id: str, now_ms: int) -> Credential:
        """Mark the credential revoked at ``now_ms`` and return it. Idempotent: revoking a
        revoked credential keeps its first revocation time. Raises ``NotFound``."""
        ...

    async def rotate(
        self, credential_id: str, salt: bytes, secret_hash: bytes, now_ms: int
    ) -> Credential:
        """Replace the credential's secret (the old token stops working) and return it.
        Raises ``NotFound``, or ``FailedPrecondition`` if it is revoked."""
        ...
