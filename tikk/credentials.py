"""Who may call the API: credentials, their grants, and the bearer tokens that prove them.

A credential belongs to one caller (a service, a team's tool, a worker fleet). It holds grants,
each a role on a scope: ``read``, ``write`` and ``admin`` on a namespace (or ``*``, every
namespace), and ``worker`` on a queue (or ``*``). Admin includes write, write includes read;
worker is separate (a worker may fetch its configuration and report results of its queues).

A token is ``tikk_<credential id>_<secret>``. The store keeps only a salt and the SHA-256 of
salt and secret: the token is shown once, when it is made. A credential may also name the
subject (x509 common name) of a client certificate that stands for it under mTLS.

Nothing here reads the clock or the network; times are passed in.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

from tikk.errors import InvalidArgument

TOKEN_PREFIX = "tikk_"
# 32 random bytes: 256 bits, far beyond guessing, so one fast hash suffices (see hash_secret).
SECRET_BYTES = 32
SALT_BYTES = 16
ANY_SCOPE = "*"
# Ids are hex, so the first "_" after the prefix ends the id (secrets may contain "_").
_ID = re.compile(r"[0-9a-f]{32}")
_SCOPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,127}")
MAX_NAME_LENGTH = 128


class Role(enum.Enum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"
    WORKER = "worker"


# What each role includes: admin ⊇ write ⊇ read; worker stands alone.
_INCLUDES: dict[Role, frozenset[Role]] = {
    Role.READ: frozenset({Role.READ}),
    Role.WRITE: frozenset({Role.READ, Role.WRITE}),
    Role.ADMIN: frozenset({Role.READ, Role.WRITE, Role.ADMIN}),
    Role.WORKER: frozenset({Role.WORKER}),
}


@dataclass(frozen=True)
class Grant:
    """A role on a scope: a namespace for read/write/admin, a queue for worker; ``*`` is any."""

    role: Role
    scope: str

    def covers(self, role: Role, scope: str) -> bool:
        """Whether this grant allows ``role`` on ``scope``."""
        return role in _INCLUDES[self.role] and self.scope in (ANY_SCOPE, scope)

    def covers_somewhere(self, role: Role) -> bool:
        """Whether this grant allows ``role`` on at least one scope."""
        return role in _INCLUDES[self.role]

    def __str__(self) -> str:
        return f"{self.role.value}:{self.scope}"

    @classmethod
    def parse(cls, text: str) -> Grant:
        """``ROLE:SCOPE``, e.g. ``read:payments``, ``worker:emails``, ``admin:*``."""
        role_name, sep, scope = text.partition(":")
        try:
            role = Role(role_name)
        except ValueError:
            known = ", ".join(r.value for r in Role)
            raise InvalidArgument("grant", f"{text!r}: role must be one of {known}") from None
        if not sep or not (scope == ANY_SCOPE or _SCOPE.fullmatch(scope)):
            raise InvalidArgument("grant", f"{text!r}: expected ROLE:NAME or ROLE:*")
        return cls(role, scope)


@dataclass(frozen=True)
class Credential:
    """One caller's credential. ``salt`` and ``secret_hash`` never appear in its repr."""

    credential_id: str
    name: str
    salt: bytes = field(repr=False)
    secret_hash: bytes = field(repr=False)
    grants: tuple[Grant, ...]
    created_ms: int
    # The x509 common name of a client certificate that stands for this credential (mTLS).
    subject: str = ""
    revoked_ms: int | None = None
    rotated_ms: int | None = None

    @property
    def revoked(self) -> bool:
        return self.revoked_ms is not None

    def allows(self, role: Role, scope: str) -> bool:
        return any(g.covers(role, scope) for g in self.grants)

    def allows_somewhere(self, role: Role) -> bool:
        return any(g.covers_somewhere(role) for g in self.grants)

    def matches(self, secret: str) -> bool:
        """Whether ``secret`` is this credential's, compared in constant time."""
        return hmac.compare_digest(hash_secret(self.salt, secret), self.secret_hash)


@dataclass(frozen=True)
class IssuedSecret:
    """A fresh secret, its salt and hash. ``token`` is shown to the caller once, never stored."""

    token: str = field(repr=False)
    salt: bytes = field(repr=False)
    secret_hash: bytes = field(repr=False)


def new_credential_id() -> str:
    return secrets.token_hex(16)


def issue_secret(credential_id: str) -> IssuedSecret:
    """A new random secret for ``credential_id``: the token to hand out, and what to store."""
    secret = secrets.token_urlsafe(SECRET_BYTES)
    salt = secrets.token_bytes(SALT_BYTES)
    return IssuedSecret(f"{TOKEN_PREFIX}{credential_id}_{secret}", salt, hash_secret(salt, secret))


def hash_secret(salt: bytes, secret: str) -> bytes:
    """SHA-256 of salt and secret. A slow password hash (bcrypt, scrypt) defends low-entropy
    passwords against guessing; a 256-bit random secret cannot be guessed, so a fast hash
    loses nothing, and it keeps checking a token cheap on every call. The salt keeps equal
    secrets from having equal hashes."""
    return hashlib.sha256(salt + secret.encode()).digest()


def split_token(token: str) -> tuple[str, str] | None:
    """(credential id, secret) of a well-formed token, else None."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    credential_id, sep, secret = token[len(TOKEN_PREFIX) :].partition("_")
    if not sep or not secret or not _ID.fullmatch(credential_id):
        return None
    return credential_id, secret
