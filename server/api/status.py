"""The one place where tikk errors become gRPC status codes."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from tikk.delivery_tokens import UnknownDeliveryKey
from tikk.errors import (
    AlreadyExists,
    BackendRefused,
    BackendUnavailable,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    StaleOwner,
    TikkError,
    Unauthenticated,
)

log = logging.getLogger("tikk.server")

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
    (BackendUnavailable, grpc.StatusCode.UNAVAILABLE),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    # A backend refusing our credentials: the server cannot serve; the message says why.
    (BackendRefused, grpc.StatusCode.UNAVAILABLE),
]


def code_of(exc: TikkError) -> grpc.StatusCode:
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


def numeric(code: grpc.StatusCode) -> int:
    """The google.rpc.Code number of a status (for per-item results in bulk responses)."""
    value: int = code.value[0]
    return value


# The context every servicer method gets.
Ctx = grpc.aio.ServicerContext[Any, Any]
R = TypeVar("R")
Method = Callable[[Any, Any, Ctx], Awaitable[R]]


# How long before the caller's deadline a call that is still waiting for a backend gives up,
# so the caller hears UNAVAILABLE (retriable, with the reason) instead of DEADLINE_EXCEEDED.
_DEADLINE_MARGIN_S = 0.25


def maps_errors(method: Method[R]) -> Method[R]:
    """Decorator for unary servicer methods: a ``TikkError`` aborts with its status, and a
    call whose backend does not answer before the caller's deadline is UNAVAILABLE."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: Ctx) -> R:
        try:
            async with asyncio.timeout(_budget_s(context)):
                return await method(self, request, context)
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                "a store or queue did not answer before the call's deadline; the request may "
                "still take effect (repeat it: creates with an id are idempotent)",
            )
            raise AssertionError("unreachable: abort raises") from None
        except TikkError as exc:
            await context.abort(code_of(exc), str(exc))
            raise AssertionError("unreachable: abort raises") from exc

    return wrapper


def _budget_s(context: Ctx) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else max(0.05, remaining - _DEADLINE_MARGIN_S)
