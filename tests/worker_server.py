"""A real ``WorkerService`` (grpc.aio, loopback) for worker SDK tests.

It hands out a queue URL and acknowledges results like the real server, keeping what it
received across restarts (as the real server's run history does), so a test can stop it,
start it again on the same port and check that every result arrived. Misbehaviour is chosen
per call: finish the call cleanly or abort it after some results.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import grpc

from tikk.v1 import worker_pb2, worker_pb2_grpc


def free_port() -> int:
    """A loopback port that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class WorkerServer(worker_pb2_grpc.WorkerServiceServicer):  # type: ignore[misc]
    """``received`` counts every arrival of each run id; ``acked`` holds the run ids
    acknowledged, ``acked_tasks`` the task ids of their deliveries.

    ``script`` says how each new result call behaves, one entry per call in order (later
    calls behave normally): ``("finish", n)`` acknowledges nothing and ends the call with OK
    after ``n`` results, ``("abort", n)`` ends it with UNAVAILABLE after ``n``.

    ``batches``: whether ``ReportResultBatches`` is served (else it answers UNIMPLEMENTED, as
    a server without it would); ``batch_messages`` counts the batch messages received.
    """

    def __init__(
        self, queue_url: str = "local://unused.db", port: int = 0, *, batches: bool = True
    ) -> None:
        self.queue_url = queue_url
        self.port = port or free_port()
        self.received: Counter[str] = Counter()
        self.acked: set[str] = set()
        self.acked_tasks: set[str] = set()
        self.calls = 0
        self.batches = batches
        self.batch_messages = 0
        self.script: list[tuple[str, int]] = []
        self.tells_time = True  # GetWorkerConfig's server_time: this machine's clock
        self.config_calls = 0
        self._server: grpc.aio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Listen on ``port`` (the same one after a restart)."""
        server = grpc.aio.server()
        worker_pb2_grpc.add_WorkerServiceServicer_to_server(self, server)
        server.add_insecure_port(self.address)
        await server.start()
        self._server = server

    async def stop(self) -> None:
        """Stop at once: open calls end as they would when the server goes away."""
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    async def GetWorkerConfig(
        self, request: worker_pb2.GetWorkerConfigRequest, context: Any
    ) -> worker_pb2.GetWorkerConfigResponse:
        response = worker_pb2.GetWorkerConfigResponse(queue_url=self.queue_url)
        response.visibility_timeout.FromMilliseconds(60_000)
        if self.tells_time:
            response.server_time.FromMilliseconds(time.time_ns() // 1_000_000)
        self.config_calls += 1
        return response

    async def ReportResultBatches(
        self, request_iterator: AsyncIterator[worker_pb2.RunResultBatch], context: Any
    ) -> AsyncIterator[worker_pb2.ResultAckBatch]:
        if not self.batches:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no result batches here")
        await context.send_initial_metadata(())

        async def each() -> AsyncIterator[worker_pb2.RunResult]:
            async for batch in request_iterator:
                self.batch_messages += 1
                for r in batch.results:
                    yield r

        async for ack in self.ReportResults(each(), context):
            yield worker_pb2.ResultAckBatch(acks=[ack])

    async def ReportResults(
        self, request_iterator: AsyncIterator[worker_pb2.RunResult], context: Any
    ) -> AsyncIterator[worker_pb2.ResultAck]:
        self.calls += 1
        action, limit = self.script.pop(0) if self.script else ("ack", 0)
        seen = 0
        async for result in request_iterator:
            self.received[result.run_id] += 1
            seen += 1
            if action == "ack":
                self.acked.add(result.run_id)
                self.acked_tasks.add(result.delivery.task_id)
                yield worker_pb2.ResultAck(run_id=result.run_id)
            elif seen >= limit:
                if action == "abort":
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "scripted abort")
                return
