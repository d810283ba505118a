"""Middleware: code around every run of a Worker's handlers, in a chain.

A middleware is an async callable ``(call, call_next) -> output``: it may act before the run,
call ``await call_next(call)`` to go on down the chain (the last link decodes the payload, runs
the handler within its limits and timeout, and encodes what it returned), and act after it or
when it raised. It returns what ``call_next`` returned (the run's output bytes) and lets an
exception go on up, where the Worker turns it into the run's result: ``Retry``,
``NonRetryableError`` and any other error mean what they mean to a handler. Middleware is
given to the Worker in order, outermost first::

    class DatabaseSession(RunHooks):
        async def before(self, ctx: TaskContext) -> None:
            ctx.resources["db"] = await pool.acquire()

        async def finally_(self, ctx: TaskContext) -> None:
            await pool.release(ctx.resources.pop("db"))

    worker = Worker(["email"], middleware=[DatabaseSession()])

Every run passes the chain, also one that never reaches a handler (a message delivered too
often, a handler this worker lacks): those raise from the last link like a handler would.
OpenTelemetry is one such middleware (``worker_sdk.telemetry.RunTelemetry``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tikk.v1 import worker_pb2
from worker_sdk.context import TaskContext


@dataclass(frozen=True)
class RunCall:
    """One run going down the chain: what its handler is told (``ctx``), the payload as the
    queue delivered it, the queue message's headers (the W3C trace context on Kafka), the
    delivery itself, and when the run started (epoch ms)."""

    ctx: TaskContext
    payload: bytes
    headers: Mapping[str, str]
    delivery: worker_pb2.Delivery
    started_ms: int


Next = Callable[[RunCall], Awaitable[bytes]]


class Middleware(Protocol):
    """Code around a run (see the module)."""

    async def __call__(self, call: RunCall, call_next: Next) -> bytes:
        """Run ``call`` through the rest of the chain and return its output."""
        ...


class RunHooks:
    """A middleware told of each run's phases: ``before`` it, ``after`` a success (with the
    output), ``on_error`` (with the exception, which still fails the run), then ``finally_``
    whatever happened, once ``before`` returned. Override what is needed; each does nothing
    by default. An exception raised in a hook fails the run as a handler's would."""

    async def before(self, ctx: TaskContext) -> None:
        """Before the handler runs."""

    async def after(self, ctx: TaskContext, output: bytes) -> None:
        """After the handler returned ``output`` (encoded)."""

    async def on_error(self, ctx: TaskContext, error: BaseException) -> None:
        """After the run raised ``error`` (also ``Retry``, a timeout or a cancellation)."""

    async def finally_(self, ctx: TaskContext) -> None:
        """Last, in any case."""

    async def __call__(self, call: RunCall, call_next: Next) -> bytes:
        await self.before(call.ctx)  # nothing to close if it raised: finally_ is not called
        try:
            output = await call_next(call)
            await self.after(call.ctx, output)
            return output
        except BaseException as exc:
            await self.on_error(call.ctx, exc)
            raise
        finally:
            await self.finally_(call.ctx)


def chain(middleware: Sequence[Middleware], last: Next) -> Next:
    """``last`` wrapped in ``middleware``, the first outermost."""
    call_next = last
    for link in reversed(middleware):
        call_next = _link(link, call_next)
    return call_next


def _link(link: Middleware, call_next: Next) -> Next:
    async def run(call: RunCall) -> bytes:
        return await link(call, call_next)

    return run
