"""The error interceptor: a ``TikkError`` a servicer raises ends its call with the status
``server.api.status.code_of`` gives it and the error's message, for every kind of call.

Servicers raise; they never abort with a status of their own choosing, so an error means one
status wherever it is raised. A servicer that answers a stream's failure with more than the
error (how far it got) catches it itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from server.api.status import Ctx, code_of
from server.interceptors.handlers import Behaviour, CallKind, RpcHandler, answers, rewrapped
from tikk.errors import TikkError


class ErrorStatuses(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Maps what every servicer raises to its status (see the module)."""

    # Returns None for a method no service has, though the stubs say otherwise.
    async def intercept_service(  # type: ignore[override]
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[RpcHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> RpcHandler | None:
        handler = await continuation(handler_call_details)
        return None if handler is None else rewrapped(handler, _mapped)


def _mapped(inner: Behaviour, kind: CallKind) -> Behaviour:
    if kind.response_streaming:

        async def stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            try:
                async for answer in answers(inner(request, context)):
                    yield answer
            except TikkError as exc:
                await context.abort(code_of(exc), str(exc))

        return stream

    async def call(request: Any, context: Ctx) -> Any:
        try:
            return await inner(request, context)
        except TikkError as exc:
            await context.abort(code_of(exc), str(exc))

    return call
