"""The one place where tikk errors become gRPC status codes."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from tikk.errors import (
    AlreadyExists,
    BackendUnavailable,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StaleOwner,
    TikkError,
)

log = logging.getLogger("tikk.server")

_CODES: list[tuple[type[TikkError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (Conflict, grpc.StatusCode.ABORTED),
    (StaleOwner, grpc.StatusCode.ABORTED),
    (BackendUnavailable, grpc.StatusCode.UNAVAILABLE),
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


R = TypeVar("R")
Method = Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[R]]


def maps_errors(method: Method[R]) -> Method[R]:
    """Decorator for unary servicer methods: a ``TikkError`` aborts with its status."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> R:
        try:
            return await method(self, request, context)
        except TikkError as exc:
            await context.abort(code_of(exc), str(exc))
            raise AssertionError("unreachable: abort raises") from exc

    return wrapper
