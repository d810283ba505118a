"""A call whose backend does not answer before the caller's deadline hears UNAVAILABLE with
the reason (retriable), not a bare DEADLINE_EXCEEDED: a real gRPC server on a loopback port
with the server's deadline interceptor, whose own bound is far off here."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from server.interceptors.deadlines import CallDeadlines
from tikk.settings import Deadlines


class StalledBackend(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """A servicer method waiting on a backend that answers after ``delay_s``."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.cancelled = asyncio.Event()

    async def Check(self, request: Any, context: Any) -> health_pb2.HealthCheckResponse:
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


@pytest.fixture
async def served() -> AsyncIterator[tuple[StalledBackend, Any]]:
    backend = StalledBackend(delay_s=5.0)
    server = grpc.aio.server(interceptors=[CallDeadlines(Deadlines(call_ms=60_000))])
    health_pb2_grpc.add_HealthServicer_to_server(backend, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield backend, health_pb2_grpc.HealthStub(channel)
    await server.stop(0)


async def test_a_stalled_backend_is_unavailable_before_the_deadline(
    served: tuple[StalledBackend, Any],
) -> None:
    backend, stub = served
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
    assert failure.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "deadline" in (failure.value.details() or "")
    assert backend.cancelled.is_set()  # the wait was given up, not left running


async def test_a_call_without_deadline_waits_for_the_backend(
    served: tuple[StalledBackend, Any],
) -> None:
    backend, stub = served
    backend.delay_s = 0.3
    reply = await stub.Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
