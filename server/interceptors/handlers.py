"""Rebuilding a gRPC method handler around its behaviour, for the interceptors.

A grpc.aio interceptor sees a call's handler before the call runs; to act around the call it
returns a new handler of the same kind whose behaviour wraps the old one. ``MethodInterceptor``
hands each method's handler to ``wrap``, and ``rewrapped`` rebuilds a handler for the four
kinds of call, so each interceptor only says what to wrap a behaviour in.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:  # generic in the type stubs only
    RpcHandler = grpc.RpcMethodHandler[Any, Any]
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    RpcHandler = grpc.RpcMethodHandler
    _Interceptor = grpc.aio.ServerInterceptor
# The aio server runs async behaviours, which grpc's (synchronous) type stubs do not describe.
Behaviour = Any


class CallKind(enum.Enum):
    """The four kinds of gRPC call, by whether requests and responses stream."""

    UNARY_UNARY = "unary_unary"
    UNARY_STREAM = "unary_stream"
    STREAM_UNARY = "stream_unary"
    STREAM_STREAM = "stream_stream"

    @property
    def response_streaming(self) -> bool:
        return self in (CallKind.UNARY_STREAM, CallKind.STREAM_STREAM)


_MAKERS = {
    CallKind.UNARY_UNARY: grpc.unary_unary_rpc_method_handler,
    CallKind.UNARY_STREAM: grpc.unary_stream_rpc_method_handler,
    CallKind.STREAM_UNARY: grpc.stream_unary_rpc_method_handler,
    CallKind.STREAM_STREAM: grpc.stream_stream_rpc_method_handler,
}


def kind_of(handler: RpcHandler) -> CallKind:
    if handler.request_streaming:
        return CallKind.STREAM_STREAM if handler.response_streaming else CallKind.STREAM_UNARY
    return CallKind.UNARY_STREAM if handler.response_streaming else CallKind.UNARY_UNARY


def rewrapped(
    handler: RpcHandler,
    wrap: Callable[[Behaviour, CallKind], Behaviour],
    deserializer: Callable[[bytes], Any] | None = None,
) -> RpcHandler:
    """A handler of ``handler``'s kind whose behaviour is ``wrap(behaviour, kind)``, parsing
    requests with ``deserializer`` if given (else as before)."""
    kind = kind_of(handler)
    return _MAKERS[kind](
        wrap(getattr(handler, kind.value), kind),
        request_deserializer=deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


async def answers(result: Any) -> AsyncIterator[Any]:
    """The answers of a response-streaming behaviour: an async generator's items, or none
    from one that writes through its context and returns."""
    if inspect.isasyncgen(result):
        async for answer in result:
            yield answer
    else:
        await result


class MethodInterceptor(_Interceptor):
    """An interceptor that may wrap the handler of each method a service has."""

    # Returns None for a method no service has, though the stubs say otherwise.
    async def intercept_service(  # type: ignore[override]
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[RpcHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> RpcHandler | None:
        handler = await continuation(handler_call_details)
        return None if handler is None else self.wrap(handler, handler_call_details.method)

    def wrap(self, handler: RpcHandler, method: str) -> RpcHandler:
        """``handler`` of ``method`` (``/package.Service/Method``), or a handler around it."""
        raise NotImplementedError
