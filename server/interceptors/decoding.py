"""Requests that are not valid messages of their type end in INVALID_ARGUMENT.

gRPC parses a request before any servicer runs, and a parse failure there surfaces as UNKNOWN
with a traceback in the log. This interceptor gives every method a parser that returns a
marker instead of raising, and a behaviour that answers the marker with INVALID_ARGUMENT. A
malformed message in a request stream ends the stream there: the servicer handles the messages
before it as usual (their answers are sent), then the call ends with INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from server.api.status import Ctx
from server.interceptors.handlers import (
    Behaviour,
    CallKind,
    MethodInterceptor,
    RpcHandler,
    rewrapped,
)

_Parse = Callable[[bytes], Any]


@dataclass(frozen=True)
class _Malformed:
    """Stands for a request that did not parse; ``type_name`` is the expected message."""

    type_name: str


class MalformedRequests(MethodInterceptor):
    """Wraps every method handler; see the module docstring."""

    def wrap(self, handler: RpcHandler, method: str) -> RpcHandler:
        if handler.request_deserializer is None:
            return handler
        return _guarded(handler)


def _lenient(parse: _Parse) -> _Parse:
    type_name = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
    name = type_name.full_name if type_name is not None else "request"

    def read(raw: bytes) -> Any:
        try:
            return parse(raw)
        except DecodeError:
            return _Malformed(name)

    return read


async def _refuse(context: Ctx, request: _Malformed) -> None:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid {request.type_name} message"
    )


async def _until_malformed(
    requests: AsyncIterator[Any], seen: list[_Malformed]
) -> AsyncIterator[Any]:
    """``requests`` up to the first malformed one, which ends the stream and goes to ``seen``.

    Ending the stream rather than aborting here: servicers read their requests in tasks of
    their own, and an abort from such a task leaves the call hanging.
    """
    async for request in requests:
        if isinstance(request, _Malformed):
            seen.append(request)
            return
        yield request


def _guarded(h: RpcHandler) -> RpcHandler:
    assert h.request_deserializer is not None  # the caller passes on handlers without one
    return rewrapped(h, _guard, _lenient(h.request_deserializer))


def _guard(inner: Behaviour, kind: CallKind) -> Behaviour:
    wrappers = {
        CallKind.UNARY_UNARY: _unary_unary, CallKind.UNARY_STREAM: _unary_stream,
        CallKind.STREAM_UNARY: _stream_unary, CallKind.STREAM_STREAM: _stream_stream,
    }  # fmt: skip
    return wrappers[kind](inner)


def _unary_unary(inner: Behaviour) -> Behaviour:
    async def unary_unary(request: Any, context: Ctx) -> Any:
        if isinstance(request, _Malformed):
            await _refuse(context, request)
        return await inner(request, context)

    return unary_unary


def _unary_stream(inner: Behaviour) -> Behaviour:
    async def unary_stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
        if isinstance(request, _Malformed):
            await _refuse(context, request)
        async for response in inner(request, context):
            yield response

    return unary_stream


def _stream_unary(inner: Behaviour) -> Behaviour:
    async def stream_unary(requests: AsyncIterator[Any], context: Ctx) -> Any:
        seen: list[_Malformed] = []
        response = await inner(_until_malformed(requests, seen), context)
        if seen:
            await _refuse(context, seen[0])
        return response

    return stream_unary


def _stream_stream(inner: Behaviour) -> Behaviour:
    async def stream_stream(requests: AsyncIterator[Any], context: Ctx) -> AsyncIterator[Any]:
        seen: list[_Malformed] = []
        async for response in inner(_until_malformed(requests, seen), context):
            yield response
        if seen:
            await _refuse(context, seen[0])

    return stream_stream
