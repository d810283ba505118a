"""The error interceptor: a ``TikkError`` a servicer raises ends its call with the status
``server.api.status.code_of`` gives it and the error's message, for every kind of call.

Servicers raise; they never abort with a status of their own choosing, so an error means one
status wherever it is raised. A servicer that answers a stream's failure with more than the
error (how far it got) catches it itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from server.api.status import Ctx, code_of, detail_of
from server.interceptors.handlers import (
    Behaviour,
    CallKind,
    MethodInterceptor,
    RpcHandler,
    answers,
    rewrapped,
)
from tikk.errors import TikkError


class ErrorStatuses(MethodInterceptor):
    """Maps what every servicer raises to its status (see the module)."""

    def wrap(self, handler: RpcHandler, method: str) -> RpcHandler:
        return rewrapped(handler, _mapped)


def _mapped(inner: Behaviour, kind: CallKind) -> Behaviour:
    if kind.response_streaming:

        async def stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            try:
                async for answer in answers(inner(request, context)):
                    yield answer
            except TikkError as exc:
                await context.abort(code_of(exc), detail_of(exc))

        return stream

    async def call(request: Any, context: Ctx) -> Any:
        try:
            return await inner(request, context)
        except TikkError as exc:
            await context.abort(code_of(exc), detail_of(exc))

    return call
