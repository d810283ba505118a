"""The one place where tikk errors become gRPC status codes."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

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
    StreamIdle,
    TikkError,
    Unauthenticated,
)
from tikk.settings import Deadlines

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
    (StreamIdle, grpc.StatusCode.DEADLINE_EXCEEDED),
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


# --- server-side deadlines ------------------------------------------------------------------


if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]


class ServerDeadlines(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Every unary call of every service runs at most ``deadlines.call_ms``, whatever
    deadline its caller set (or none): a call still waiting then is given up (its backend
    wait cancelled) and answered UNAVAILABLE, so one slow query cannot hold a process.
    Streams are bounded per message where they are served (``bounded``, ``idle_bounded``)."""

    def __init__(self, deadlines: Deadlines) -> None:
        self._limit_s = deadlines.call_ms / 1000

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.response_streaming:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._bounded_call(handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _bounded_call(self, behavior: Any) -> Any:
        limit_s = self._limit_s

        async def call(request: Any, context: Ctx) -> Any:
            try:
                async with asyncio.timeout(limit_s):
                    return await behavior(request, context)
            except TimeoutError:
                await context.abort(grpc.StatusCode.UNAVAILABLE, _over_limit("the call", limit_s))

        return call


async def bounded(work: Awaitable[R], limit_ms: int, what: str) -> R:
    """``work``, given up after ``limit_ms`` with ``BackendUnavailable`` (one message of a
    stream: an import batch, a batch of results)."""
    try:
        async with asyncio.timeout(limit_ms / 1000):
            return await work
    except TimeoutError:
        raise BackendUnavailable(_over_limit(what, limit_ms / 1000)) from None


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


def _over_limit(what: str, limit_s: float) -> str:
    return (
        f"{what} took longer than the server's limit of {limit_s:g} s (a store or queue is "
        "slow); it may still take effect: repeat it (creates with an id are idempotent)"
    )
