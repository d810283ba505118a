"""What the client raises when a call fails: one tree, by gRPC status code.

::

    ClientError                    any failed call; .code, .details, .retriable
    ├── InvalidArgumentError       the request is malformed; the message names the field
    ├── NotFoundError              no such task, run or schedule
    ├── AlreadyExistsError         the id is taken by different content
    ├── FailedPreconditionError    the state does not allow it (cancelling a finished task)
    ├── ConflictError              ABORTED: the expected version is stale; read again
    ├── ResourceExhaustedError     over a quota or limit of the service; the message names it
    ├── UnauthenticatedError       no credential, or one the server does not accept
    ├── PermissionDeniedError      the credential's roles do not cover the namespace or queue
    ├── UnavailableError           the server or a backend did not answer (retriable)
    ├── DeadlineExceededError      no answer within the call's timeout (retriable)
    └── ImportInterrupted          an import stream broke; .next_index says where to resume

A status without a class of its own (INTERNAL, ...) is a plain
``ClientError``. ``retriable`` says whether repeating the same call may succeed; a create
with a task id of your own is idempotent, so repeating it is always safe. The client
repeats a call that is safe to repeat after UNAVAILABLE itself (``CallRetries``): an
``UnavailableError`` of such a call comes after its last attempt.
"""

from __future__ import annotations

import grpc


class ClientError(Exception):
    """A call to the server failed with ``code``; ``details`` is the server's message."""

    retriable = False

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class InvalidArgumentError(ClientError):
    """The request is malformed or out of range; nothing was written."""


class NotFoundError(ClientError):
    """The named task, run or schedule does not exist in the namespace."""


class AlreadyExistsError(ClientError):
    """An object with this id exists with different content."""


class FailedPreconditionError(ClientError):
    """The request is valid but the object's state does not allow it."""


class ConflictError(ClientError):
    """The object changed since it was read (a stale expected version); nothing changed."""


class ResourceExhaustedError(ClientError):
    """The request is over a limit of the service; the message names the limit."""


class UnauthenticatedError(ClientError):
    """The call carried no credential, or one that is unknown, revoked or malformed: check
    the ``Transport``'s token (or client certificate)."""


class PermissionDeniedError(ClientError):
    """The credential is valid but its roles do not cover the request; the message names
    the role needed and the namespace or queue."""


class UnavailableError(ClientError):
    """The server, or a store or queue behind it, did not answer. The request may still
    have taken effect, so repeat it (creates with an id are idempotent). A call that is safe
    to repeat was repeated already, as the client's ``CallRetries`` allow."""

    retriable = True


class DeadlineExceededError(ClientError):
    """No answer within the call's timeout; as with ``UnavailableError``, it may have taken
    effect."""

    retriable = True


class ImportInterrupted(ClientError):
    """An ``import_tasks`` stream broke before every item was answered.

    Items before ``next_index`` got their results. Items from ``next_index`` on may or may
    not be stored: send them again (``import_tasks(rest, first_index=next_index)``). With
    task ids of your own, the ones that were stored come back with ``created=False`` and
    nothing is created twice; without ids, a resend may create some tasks twice.
    """

    def __init__(self, cause: ClientError, answered: int, next_index: int) -> None:
        super().__init__(
            cause.code,
            f"the import stream broke after {answered:,} items were answered; resend from "
            f"item {next_index:,} ({cause.details})",
        )
        self.retriable = cause.retriable
        self.cause = cause
        self.answered = answered
        self.next_index = next_index


_BY_CODE: dict[grpc.StatusCode, type[ClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: ConflictError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def error_for(code: grpc.StatusCode, details: str) -> ClientError:
    """The client error of a status (also used for per-item import results)."""
    return _BY_CODE.get(code, ClientError)(code, details)


def error_from_rpc(exc: grpc.RpcError) -> ClientError:
    """The one place where a failed gRPC call becomes a client error."""
    # Both the blocking and the asyncio failures carry code() and details() at run time,
    # though the base class does not declare them.
    code = getattr(exc, "code", lambda: grpc.StatusCode.UNKNOWN)()
    details = getattr(exc, "details", lambda: "")()
    return error_for(code, details or "")
