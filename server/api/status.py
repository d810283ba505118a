"""The one place where tikk errors become gRPC status codes, and the bounds a request stream's
messages are served within.

A servicer raises ``TikkError`` and the error interceptor (``server.interceptors.statuses``)
ends the call with ``code_of`` it; bulk answers carry per-item codes (``numeric``). Unary
calls are bounded by ``server.interceptors.deadlines``; one message of a stream by ``bounded``
and the wait for the next by ``idle_bounded``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import grpc

from tikk.delivery_tokens import UnknownDeliveryKey
from tikk.errors import (
    AlreadyExists,
    BackendRefused,
    BackendUnavailable,
    CancelUnsettled,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StaleOwner,
    StreamIdle,
    TikkError,
    Unauthenticated,
)
from tikk.text_rules import shown

# A status's message travels as metadata, which clients refuse beyond a few KiB (the error
# would reach the caller as a client-side RESOURCE_EXHAUSTED instead): whatever an error
# quotes, what a caller is told is bounded here, with hidden characters escaped.
_DETAIL_MOST = 1_000

_CODES: list[tuple[type[TikkError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    # Before PermissionDenied: the servers lack a key (configuration), so the worker reports
    # the result again instead of dropping it.
    (UnknownDeliveryKey, grpc.StatusCode.UNAVAILABLE),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (Conflict, grpc.StatusCode.ABORTED),
    (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StaleOwner, grpc.StatusCode.ABORTED),
    (StreamIdle, grpc.StatusCode.DEADLINE_EXCEEDED),
    (BackendUnavailable, grpc.StatusCode.UNAVAILABLE),
    # The outcome is unknown to the server too (it may run once): UNAVAILABLE is the code
    # clients already treat as "may or may not have taken effect"; not retriable.
    (CancelUnsettled, grpc.StatusCode.UNAVAILABLE),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    # A backend refusing our credentials: the server cannot serve; the message says why.
    (BackendRefused, grpc.StatusCode.UNAVAILABLE),
]


def code_of(exc: TikkError) -> grpc.StatusCode:
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def detail_of(exc: TikkError) -> str:
    """What the caller is told of ``exc``: its message, escaped and bounded."""
    return shown(str(exc), _DETAIL_MOST)


def numeric(code: grpc.StatusCode) -> int:
    """The google.rpc.Code number of a status (for per-item results in bulk responses)."""
    value: int = code.value[0]
    return value


# The context every servicer method gets.
Ctx = grpc.aio.ServicerContext[Any, Any]
R = TypeVar("R")


async def bounded(work: Awaitable[R], limit_ms: int, what: str) -> R:
    """``work``, given up after ``limit_ms`` with ``BackendUnavailable`` (one message of a
    stream: an import batch, a batch of results)."""
    try:
        async with asyncio.timeout(limit_ms / 1000):
            return await work
    except TimeoutError:
        raise BackendUnavailable(over_limit(what, limit_ms / 1000)) from None


async def idle_bounded(messages: AsyncIterator[R], idle_ms: int) -> AsyncIterator[R]:
    """``messages``, ending with ``StreamIdle`` when none arrives for ``idle_ms``."""
    stream = aiter(messages)
    while True:
        try:
            async with asyncio.timeout(idle_ms / 1000):
                message = await anext(stream)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise StreamIdle(
                f"the stream sent no message for {idle_ms / 1000:g} s (the server's limit); "
                "it was closed: open a new one to go on"
            ) from None
        yield message


def over_limit(what: str, limit_s: float) -> str:
    """What a caller hears when ``what`` outran the server's bound on it."""
    return (
        f"{what} took longer than the server's limit of {limit_s:g} s (a store or queue is "
        "slow); it may still take effect: repeat it (creates with an id are idempotent)"
    )
