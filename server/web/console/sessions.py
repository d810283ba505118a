"""Who is using the console: sessions behind a cookie, each with its CSRF token.

With ``--auth`` a person logs in with a token (the same tokens as gRPC; ``tikk auth``) and the
session stands for that credential: a reader sees, a writer acts, each in the namespaces the
grants name, re-checked against the credential store on every request (a revoked token's
session ends at its next request). Without ``--auth`` the console is as open as the API, and a
visitor gets a session at once; the session still carries a CSRF token, so another site's page
cannot make a browser act on a console on loopback.

The cookie holds only a random session id (HttpOnly, SameSite=Strict, Secure over TLS); the
token stays in the server's memory, which a restart clears (everyone logs in again).

What a login may see and do is the API's rule for the RPC each page stands for
(``server.web.console.access``). A worker credential opens no session: the console is for
people, and a worker's grant names queues, not namespaces. The login form carries a token of
its own (an HMAC of a random cookie under a key of this process), so another site cannot sign
a browser in under a login of the attacker's choosing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from server.auth.authenticator import CredentialView
from server.web.console.access import allowed
from tikk.credentials import ANY_SCOPE, Credential, Role
from tikk.errors import PermissionDenied

COOKIE = "tikk_session"
# The login form's cookie: a random value whose HMAC the form must send back.
LOGIN_COOKIE = "tikk_login"
_IDLE_S = 8 * 3600
_MAX_SESSIONS = 10_000


@dataclass
class Session:
    """One signed-in browser: its CSRF token and, with auth, its token."""

    session_id: str
    csrf: str
    token: str | None
    last_seen: float


@dataclass(frozen=True)
class Viewer:
    """What a request may do: ``credential`` None means the console runs without auth."""

    credential: Credential | None
    csrf: str

    @property
    def name(self) -> str:
        return "no login (auth is off)" if self.credential is None else self.credential.name

    def may(self, rpc: str, namespace: str) -> bool:
        """Whether this viewer may call ``rpc`` (``server.web.console.access``) on
        ``namespace``: what the pages offer."""
        return allowed(self.credential, rpc, namespace)

    def namespaces(self) -> list[str]:
        """The namespaces its grants name (``*`` for any), for the namespace picker."""
        if self.credential is None:
            return [ANY_SCOPE]
        scopes = {g.scope for g in self.credential.grants if g.covers_somewhere(Role.READ)}
        return sorted(scopes)


class ConsoleSessions:
    """The sessions of one server process (see the module)."""

    def __init__(
        self, view: CredentialView | None, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._view = view
        self._monotonic = monotonic
        self._sessions: dict[str, Session] = {}
        self._login_key = secrets.token_bytes(32)

    @property
    def auth(self) -> bool:
        return self._view is not None

    def open(self, token: str | None = None) -> Session:
        """A new session (for ``token`` once it has been checked)."""
        self._forget_idle()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), token,
                          self._monotonic())  # fmt: skip
        self._sessions[session.session_id] = session
        return session

    async def login(self, token: str) -> Session:
        """A session for ``token``; raises ``Unauthenticated`` for a token that is not one,
        ``PermissionDenied`` for a worker's."""
        if self._view is not None:
            _for_people(await self._view.authenticate(token, None))
        return self.open(token)

    def login_form(self) -> tuple[str, str]:
        """A new login form's (cookie value, form token)."""
        nonce = secrets.token_urlsafe(32)
        return nonce, self._login_mac(nonce)

    def login_form_matches(self, nonce: str, sent: str) -> bool:
        """Whether ``sent`` is the form token of the login cookie ``nonce``."""
        return bool(nonce) and hmac.compare_digest(self._login_mac(nonce).encode(), sent.encode())

    def _login_mac(self, nonce: str) -> str:
        return hmac.new(self._login_key, nonce.encode(), hashlib.sha256).hexdigest()

    def close(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def find(self, session_id: str | None) -> Session | None:
        session = self._sessions.get(session_id or "")
        if session is None or self._monotonic() - session.last_seen > _IDLE_S:
            return None
        session.last_seen = self._monotonic()
        return session

    async def viewer(self, session: Session) -> Viewer:
        """The viewer ``session`` stands for now; ``Unauthenticated`` if its token no longer
        is one (revoked): the caller ends the session."""
        if self._view is None:
            return Viewer(None, session.csrf)
        credential = _for_people(await self._view.authenticate(session.token, None))
        return Viewer(credential, session.csrf)

    @staticmethod
    def csrf_matches(session: Session, sent: str) -> bool:
        return hmac.compare_digest(session.csrf.encode(), sent.encode())

    def _forget_idle(self) -> None:
        now = self._monotonic()
        for key in [k for k, s in self._sessions.items() if now - s.last_seen > _IDLE_S]:
            del self._sessions[key]
        while len(self._sessions) >= _MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]


def _for_people(credential: Credential) -> Credential:
    """``credential``, unless it holds no role on any namespace (a worker's): then
    ``PermissionDenied``."""
    if not credential.allows_somewhere(Role.READ):
        raise PermissionDenied(
            f"{credential.name} is a worker credential: the console needs read, write or admin "
            "on a namespace"
        )
    return credential
