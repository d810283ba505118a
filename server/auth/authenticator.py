"""Who is calling: a bearer token or a client certificate, checked against an in-memory view
of the credential store.

The view is reloaded from the store at most every ``fresh_s`` seconds, in the background, while
calls keep using the last one; a call never uses a view older than ``max_age_s`` (it waits for
a reload instead, and is UNAVAILABLE if the store does not answer). So a revocation written by
any process applies on every server within ``max_age_s`` plus one store read, with no message
between them, and an idle server checks its first call against the store as it is now.
The same bound holds for each message of a stream: an ``Admission`` remembers the snapshot its
credential was found in, and the caller is authenticated again only when the view holds a
newer one (so a token is hashed once per reload per stream, not once per message).

Only credentials that are not revoked are in the view. A bearer token, when present, decides
(a bad token is refused even over an mTLS connection); otherwise a verified client
certificate's common name maps to the credential with that ``subject``. Refusals say what was
missing, never what the caller sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tikk.credentials import Credential, split_token
from tikk.errors import BackendUnavailable, TikkError, Unauthenticated
from tikk.store.credentials import CredentialStore

log = logging.getLogger("tikk.server.auth")

BEARER = "bearer"
INVALID = "invalid or revoked credential"


@dataclass(frozen=True)
class CredentialSnapshot:
    """The live (not revoked) credentials, by id and by certificate subject. A subject that
    two live credentials claim maps to none: which one was meant cannot be known."""

    by_id: Mapping[str, Credential] = field(default_factory=dict)
    by_subject: Mapping[str, Credential | None] = field(default_factory=dict)

    @classmethod
    def of(cls, credentials: Sequence[Credential]) -> CredentialSnapshot:
        live = [c for c in credentials if not c.revoked]
        by_subject: dict[str, Credential | None] = {}
        for c in live:
            if c.subject:
                by_subject[c.subject] = None if c.subject in by_subject else c
        return cls({c.credential_id: c for c in live}, by_subject)


@dataclass(frozen=True)
class Presented:
    """What a call offers to prove who it is: the token of its ``authorization`` metadata
    (never shown) and the common name of its verified client certificate, either None."""

    token: str | None = field(default=None, repr=False)
    subject: str | None = None


@dataclass(frozen=True)
class Admission:
    """A caller's credential and the snapshot it was found in: while the view holds that
    snapshot, the credential stands as found, without checking the token again."""

    credential: Credential
    snapshot: CredentialSnapshot = field(repr=False, compare=False)


class CredentialView:
    """Token or certificate subject → the caller's ``Credential``."""

    def __init__(
        self,
        store: CredentialStore,
        *,
        fresh_s: float = 2.0,
        max_age_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._fresh_s, self._max_age_s = fresh_s, max_age_s
        self._monotonic = monotonic
        self._snapshot = CredentialSnapshot()
        self._loaded_at: float | None = None
        self._loading: asyncio.Task[None] | None = None

    async def authenticate(self, token: str | None, subject: str | None) -> Credential:
        """The credential of ``token`` (the text after ``Bearer``) or, without one, of the
        client certificate's ``subject``. Raises as ``admit`` does."""
        return (await self.admit(Presented(token, subject))).credential

    async def admit(self, presented: Presented, known: Admission | None = None) -> Admission:
        """The credential ``presented`` stands for in the current snapshot. ``known``, an
        earlier admission of the same caller, is returned as it is while the view still
        holds its snapshot. Raises ``Unauthenticated`` (also for a credential revoked since
        ``known``), or ``BackendUnavailable`` when the view is too old and the store does not
        answer."""
        snapshot = await self._current()
        if known is not None and known.snapshot is snapshot:
            return known
        return Admission(_find(snapshot, presented), snapshot)

    async def _current(self) -> CredentialSnapshot:
        age = None if self._loaded_at is None else self._monotonic() - self._loaded_at
        if age is None or age >= self._max_age_s:
            await asyncio.shield(self._reload())
        elif age >= self._fresh_s:
            self._reload()
        return self._snapshot

    def _reload(self) -> asyncio.Task[None]:
        """The reload in progress, or a new one: one at a time, shared by every caller."""
        if self._loading is None:
            self._loading = asyncio.create_task(self._load())
            # A background reload's failure is logged in _load; a waiting call gets it too.
            self._loading.add_done_callback(lambda t: t.cancelled() or t.exception())
        return self._loading

    async def _load(self) -> None:
        started = self._monotonic()
        try:
            snapshot = CredentialSnapshot.of(await self._store.list_all())
            if not snapshot.by_id and (self._loaded_at is None or self._snapshot.by_id):
                log.warning("no live credential: every call is refused (see `tikk auth create`)")
            self._snapshot, self._loaded_at = snapshot, started
        except TikkError as exc:
            log.warning("credentials not reloaded: %s", exc)
            raise BackendUnavailable("the credential store did not answer") from exc
        finally:
            self._loading = None


def _find(snapshot: CredentialSnapshot, presented: Presented) -> Credential:
    """The credential of ``presented`` in ``snapshot``: by token if there is one, else by
    certificate subject; ``Unauthenticated`` if none."""
    if presented.token is not None:
        return _by_token(snapshot, presented.token)
    if presented.subject:
        found = snapshot.by_subject.get(presented.subject)
        if found is None:
            raise Unauthenticated("no credential maps to the client certificate's subject")
        return found
    raise Unauthenticated(
        "a credential is required: metadata 'authorization: Bearer <token>' or a client certificate"
    )


def _by_token(snapshot: CredentialSnapshot, token: str) -> Credential:
    parts = split_token(token)
    if parts is None:
        raise Unauthenticated("malformed bearer token (expected tikk_<id>_<secret>)")
    found = snapshot.by_id.get(parts[0])
    if found is None or not found.matches(parts[1]):
        raise Unauthenticated(INVALID)
    return found


def bearer_token(metadata: Iterable[tuple[str, Any]]) -> str | None:
    """The token of the call's ``authorization`` metadata; None when there is none. Raises
    ``Unauthenticated`` for another scheme or more than one value."""
    values = [v for k, v in metadata if k.lower() == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise Unauthenticated("more than one authorization header")
    value = values[0].decode() if isinstance(values[0], bytes) else str(values[0])
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != BEARER or not token.strip():
        raise Unauthenticated("authorization must be 'Bearer <token>'")
    return token.strip()


def certificate_subject(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The common name of the client certificate the TLS handshake verified, if any."""
    if b"ssl" not in list(auth_context.get("transport_security_type", ())):
        return None
    names = list(auth_context.get("x509_common_name", ()))
    return names[0].decode() if names else None
