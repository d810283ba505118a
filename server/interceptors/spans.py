"""The tracing interceptor: each call of a tikk.v1 service runs in a server span that
continues the caller's trace (its ``traceparent`` metadata), named for the method
(``tikk.v1.TaskService/CreateTask``). Tasks a call creates carry that span's context
(``Telemetry.current_trace``), so their dispatch and run spans join the caller's trace.

Installed only when telemetry is on: a server that does not trace pays nothing for it.
Health checks and reflection are not traced (a load balancer's probes would fill the traces).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from server.api.status import Ctx
from server.interceptors.handlers import (
    Behaviour,
    CallKind,
    MethodInterceptor,
    RpcHandler,
    answers,
    rewrapped,
)
from tikk.telemetry import Telemetry

_TRACED = "/tikk.v1."


class CallSpans(MethodInterceptor):
    """A server span around each tikk.v1 call (see the module)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    def wrap(self, handler: RpcHandler, method: str) -> RpcHandler:
        if not method.startswith(_TRACED):
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
