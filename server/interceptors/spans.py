"""The tracing interceptor: each call of a tikk.v1 service runs in a server span that
continues the caller's trace (its ``traceparent`` metadata), named for the method
(``tikk.v1.TaskService/CreateTask``). Tasks a call creates carry that span's context
(``Telemetry.current_trace``), so their dispatch and run spans join the caller's trace.

Installed only when telemetry is on: a server that does not trace pays nothing for it.
Health checks and reflection are not traced (a load balancer's probes would fill the traces).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from server.api.status import Ctx
from server.interceptors.handlers import Behaviour, CallKind, RpcHandler, answers, rewrapped
from tikk.telemetry import Telemetry

_TRACED = "/tikk.v1."


class CallSpans(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """A server span around each tikk.v1 call (see the module)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    # Returns None for a method no service has, though the stubs say otherwise.
    async def intercept_service(  # type: ignore[override]
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[RpcHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> RpcHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(_TRACED):
            return handler
        name = method.removeprefix("/")
        return rewrapped(handler, lambda inner, kind: self._traced(inner, kind, name))

    def _traced(self, inner: Behaviour, kind: CallKind, name: str) -> Behaviour:
        telemetry = self._telemetry
        if kind.response_streaming:

            async def stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
                with telemetry.call_span(name, context.invocation_metadata() or ()):
                    async for answer in answers(inner(request, context)):
                        yield answer

            return stream

        async def call(request: Any, context: Ctx) -> Any:
            with telemetry.call_span(name, context.invocation_metadata() or ()):
                return await inner(request, context)

        return call
