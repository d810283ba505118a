"""Stopping runs whose task was cancelled while they went on: ``CancelWatch`` asks the server
(``WorkerService.CheckCancellations``) which of the runs going for at least ``every_s`` were
cancelled, and tells each such run's context (``RunControl.stop``), which cancels an async
handler and lets a plain function see ``ctx.cancelled``. The run then reports itself as
cancelled (``worker_sdk.execution``).

Only runs older than ``every_s`` are asked about: most runs end sooner and cost the server
nothing, and a run is stopped within about twice ``every_s`` of its cancel. A server without
the method (an older one) is asked no more; any other failure is tried again next time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from tikk.v1 import worker_pb2
from worker_sdk.context import CANCEL_REQUESTED, TaskContext

log = logging.getLogger("tikk.worker")

# The server's max_page_size: attempts per call.
_PER_CALL = 1000
_CALL_TIMEOUT_S = 5.0


class CancelWatch:
    """The runs of one Worker that may be cancelled, and the loop that asks about them."""

    def __init__(self, every_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._runs: dict[str, tuple[TaskContext, worker_pb2.RunningAttempt, float]] = {}

    def started(self, ctx: TaskContext, delivery: worker_pb2.Delivery) -> None:
        """A run of ``delivery`` began."""
        attempt = worker_pb2.RunningAttempt(
            namespace=delivery.namespace, task_id=delivery.task_id, queue=delivery.queue,
            attempt=delivery.attempt, due_time=delivery.due_time,
        )  # fmt: skip
        self._runs[ctx.run_id] = (ctx, attempt, self._clock())

    def ended(self, ctx: TaskContext) -> None:
        self._runs.pop(ctx.run_id, None)

    async def watch(self, stub: Any) -> None:
        """Ask every ``every_s`` until cancelled, or until the server says it cannot answer."""
        while True:
            await asyncio.sleep(self.every_s)
            if not await self.check(stub):
                return

    async def check(self, stub: Any) -> bool:
        """Ask once about the runs old enough; stop the cancelled ones. False if the server
        has no such method (stop asking)."""
        since = self._clock() - self.every_s
        old = [(ctx, a) for ctx, a, began in list(self._runs.values()) if began <= since]
        for start in range(0, len(old), _PER_CALL):
            chunk = old[start : start + _PER_CALL]
            request = worker_pb2.CheckCancellationsRequest(runs=[a for _, a in chunk])
            try:
                answer = await stub.CheckCancellations(request, timeout=_CALL_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.UNIMPLEMENTED:
                    log.warning("the server cannot say which tasks were cancelled while they "
                                "ran (an older server): running tasks are not stopped")  # fmt: skip
                    return False
                log.debug("asking which running tasks were cancelled failed: %s", exc)
                return True
            self._stop(chunk, answer.cancelled)
        return True

    def _stop(
        self,
        chunk: list[tuple[TaskContext, worker_pb2.RunningAttempt]],
        cancelled: Any,
    ) -> None:
        named = {(a.namespace, a.task_id, a.attempt) for a in cancelled}
        for ctx, a in chunk:
            if (a.namespace, a.task_id, a.attempt) in named:
                log.info("task %s was cancelled while it ran: stopping run %s",
                         ctx.task_id, ctx.run_id)  # fmt: skip
                ctx.control.stop(CANCEL_REQUESTED)
