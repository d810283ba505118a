"""The one error tree of tikk.

::

    TikkError
    ├── InvalidArgument       bad input; names the field           INVALID_ARGUMENT
    │   ├── ExposureRefused   a public port without TLS and auth   (server.transport_security)
    │   └── TlsFilesRefused   certificate or key files that fail   (server.transport_security)
    ├── NotFound              no such task, run or schedule        NOT_FOUND
    ├── AlreadyExists         same id, different content           ALREADY_EXISTS
    ├── FailedPrecondition    the operation does not fit the state FAILED_PRECONDITION
    │   ├── ResultRefused     a result for an attempt not running  (server.ops.refusals)
    │   └── StartTooLate      a start after its timeout ran out    (server.ops.refusals)
    ├── Conflict              the caller's copy is out of date     ABORTED
    ├── ResourceExhausted     over a quota or a request limit      RESOURCE_EXHAUSTED
    ├── StreamIdle            a client stream sent nothing too long DEADLINE_EXCEEDED
    ├── StaleOwner            a fencing epoch was refused          ABORTED
    ├── Unauthenticated       no credential, or not a valid one    UNAUTHENTICATED
    ├── PermissionDenied      the credential's roles do not cover  PERMISSION_DENIED
    │   │                     the namespace or queue
    │   └── TokenRefused      a delivery token that does not match (tikk.delivery_tokens)
    │       └── UnknownDeliveryKey  a key this server does not    UNAVAILABLE: the worker
    │                               hold                           keeps the run
    ├── BackendUnavailable    a store or queue did not answer      UNAVAILABLE, retriable
    ├── CancelUnsettled       a cancel written too close to the    UNAVAILABLE, not retriable:
    │                         due time to be sure it holds         the task may run once
    └── BackendRefused        a backend refused our credentials    UNAVAILABLE, not retriable

A subclass defined elsewhere names its module, and answers with its parent's status unless
it names its own. Backends translate their driver's exceptions into this tree at their
boundary, once; the gRPC layer maps the tree to status codes in one place
(``server/api/status.py``, applied to every call by ``server.interceptors.statuses``).
``retriable`` says whether the same call may succeed when simply repeated.
"""

from __future__ import annotations


class TikkError(Exception):
    """Base of every error tikk raises on purpose."""

    retriable = False


class InvalidArgument(TikkError):
    """A request field is malformed or out of range; nothing was written."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class NotFound(TikkError):
    """The named task or run does not exist in the namespace."""


class AlreadyExists(TikkError):
    """A task with this id exists with different content."""


class FailedPrecondition(TikkError):
    """The request is valid but the current state does not allow it."""


class Conflict(TikkError):
    """The caller's copy is out of date: another write changed the object since it was read
    (a schedule's ``expected_version`` no longer matches). Read again and retry."""


class ResourceExhausted(TikkError):
    """The request is over a limit of the service (items per stream or batch); the message
    names the limit and what to do instead."""


class StreamIdle(TikkError):
    """A client stream sent no message for longer than the server waits (it held a slot,
    such as an import stream of a namespace's quota, while doing nothing)."""


class StaleOwner(TikkError):
    """An owner presented a fencing epoch older than the one recorded for the shard."""


class BackendUnavailable(TikkError):
    """A store or queue could not be reached or timed out; the call may be repeated."""

    retriable = True


class CancelUnsettled(TikkError):
    """A cancel was written, but the store answered so late that the task had come within
    the cancel fence of its due time: a dispatcher may have claimed it just before, so it
    may still run once. The task reads CANCELLED either way (a result of such a run is
    refused), and asking again gives the same answer, never OK."""


class Unauthenticated(TikkError):
    """The call carries no credential, or one that is unknown, revoked or malformed. The
    message never repeats what the caller sent."""


class PermissionDenied(TikkError):
    """The caller may not do this: its credential's roles do not cover the request (the
    message names the role needed and the namespace or queue), or a result's delivery token
    does not match."""


class BackendRefused(TikkError):
    """A backend refused tikk's credentials or certificate (wrong user or password, a server
    certificate nobody trusts): repeating cannot help until the configuration changes. The
    message names the backend, its host and the user, never the password."""

    def __init__(self, backend: str, hosts: str, user: str, reason: str) -> None:
        who = f"user {user!r}" if user else "no user"
        super().__init__(f"{backend} at {hosts} refused {who}: {reason}")
        self.backend = backend
