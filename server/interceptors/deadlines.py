"""Bounds on unary calls: every one runs at most the server's limit (``Deadlines.call_ms``),
whatever deadline its caller set, or none; and one whose caller set a deadline gives up a
moment before it.

A call still waiting then is given up (its backend wait cancelled) and answered UNAVAILABLE
with the reason, retriable, instead of a bare DEADLINE_EXCEEDED: one slow query cannot hold a
process, and a caller hears why. Request streams are bounded per message where they are
served (``server.api.status.bounded``, ``idle_bounded``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from server.api.status import Ctx, over_limit
from server.interceptors.handlers import (
    Behaviour,
    CallKind,
    MethodInterceptor,
    RpcHandler,
    rewrapped,
)
from tikk.settings import Deadlines

# How long before the caller's deadline a call that is still waiting for a backend gives up,
# so the caller hears UNAVAILABLE (retriable, with the reason) instead of DEADLINE_EXCEEDED.
_DEADLINE_MARGIN_S = 0.25
_CALLER_DEADLINE = (
    "a store or queue did not answer before the call's deadline; the request may still take "
    "effect (repeat it: creates with an id are idempotent)"
)


class CallDeadlines(MethodInterceptor):
    """Bounds every unary call of every service (see the module)."""

    def __init__(self, deadlines: Deadlines) -> None:
        self._limit_s = deadlines.call_ms / 1000

    def wrap(self, handler: RpcHandler, method: str) -> RpcHandler:
        if handler.request_streaming or handler.response_streaming:
            return handler
        return rewrapped(handler, self._bounded)

    def _bounded(self, inner: Behaviour, kind: CallKind) -> Behaviour:
        limit_s = self._limit_s

        async def call(request: Any, context: Ctx) -> Any:
            caller_s = _caller_budget_s(context)
            try:
                async with asyncio.timeout(min(limit_s, caller_s or limit_s)):
                    return await inner(request, context)
            except TimeoutError:
                reason = over_limit("the call", limit_s)
                if caller_s is not None and caller_s < limit_s:
                    reason = _CALLER_DEADLINE
                await context.abort(grpc.StatusCode.UNAVAILABLE, reason)

        return call


def _caller_budget_s(context: Ctx) -> float | None:
    """Seconds the call may wait, by its caller's deadline (None: the caller set none)."""
    remaining = context.time_remaining()
    return None if remaining is None else max(0.05, remaining - _DEADLINE_MARGIN_S)
