"""Assembly of the gRPC server: services, health, reflection, graceful stop.

The port serves TLS (mTLS with a client CA) when the settings say so, and a non-loopback
address is refused without TLS and authentication (``server.transport_security``).
Health turns SERVING only after the stores are open, and NOT_SERVING at the start of a
stop, so load balancers drain before in-flight calls are cut. With telemetry on, the ready
queues' backlogs are reported while the server runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from server.api.admin import AdminService
from server.api.history import HistoryService
from server.api.request_decoding import MalformedRequests
from server.api.schedules import ScheduleService
from server.api.status import ServerDeadlines
from server.api.tasks import TaskService
from server.api.worker import WorkerService
from server.auth.interceptor import auth_interceptors
from server.backlog_report import report_backlog
from server.quotas import QuotaGate
from server.results import Lifecycle
from server.schedule_ops import Schedules
from server.transport_security import check_transport, server_credentials
from server.wiring import Backends
from tikk.clock import Clock
from tikk.delivery_tokens import DeliveryKeys
from tikk.settings import Settings
from tikk.telemetry import Telemetry
from tikk.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

log = logging.getLogger("tikk.server")

_SERVICES = [
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
    tasks_pb2.DESCRIPTOR.services_by_name["TaskService"].full_name,
    history_pb2.DESCRIPTOR.services_by_name["HistoryService"].full_name,
    worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
    schedules_pb2.DESCRIPTOR.services_by_name["ScheduleService"].full_name,
]


class ApiServer:
    """The tikk API on one port. ``start`` binds and returns the port actually bound.
    ``reuse_port``: other processes bind the same port and the kernel spreads connections."""

    def __init__(
        self,
        settings: Settings,
        backends: Backends,
        clock: Clock,
        rng: random.Random,
        telemetry: Telemetry | None = None,
        *,
        keys: DeliveryKeys,
        reuse_port: bool = False,
    ) -> None:
        self.settings = settings
        self._report_backlog = (
            functools.partial(report_backlog, backends.queue, clock, telemetry)
            if telemetry is not None and telemetry.enabled
            else None
        )
        self._reporting: asyncio.Task[None] | None = None
        self._server = _grpc_server(settings, backends, reuse_port)
        schedules = Schedules(
            backends.schedules, backends.store, backends.history, clock, settings.limits,
            queue=backends.queue,
        )  # fmt: skip
        lifecycle = Lifecycle(
            backends.store, backends.history, backends.queue, clock,
            limits=settings.limits, rng=rng, telemetry=telemetry, schedules=schedules,
            late_write_grace_ms=settings.late_write_grace_ms,
        )  # fmt: skip
        self._lifecycle = lifecycle
        quotas = QuotaGate(backends.quotas, backends.schedules, clock, settings.quotas)
        _add_services(
            self._server, settings, lifecycle, schedules, quotas, telemetry=telemetry, keys=keys
        )
        # grpc-stubs predates the asyncio health servicer.
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            [*_SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME], self._server
        )
        self.port = 0

    async def start(self) -> int:
        check_transport(self.settings)
        await self._lifecycle.guard.start()
        self.port = self._bind()
        if self.port == 0:
            raise OSError(f"cannot listen on {self.settings.listen}")
        await self._server.start()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        if self._report_backlog is not None:
            self._reporting = asyncio.create_task(self._report_backlog())
        return self.port

    def _bind(self) -> int:
        """The port, TLS when the settings give a certificate (``server.transport_security``)."""
        tls = self.settings.security.tls
        if tls is None:
            return self._server.add_insecure_port(self.settings.listen)
        return self._server.add_secure_port(self.settings.listen, server_credentials(tls))

    async def stop(self, grace_s: float = 5.0) -> None:
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if self._reporting is not None:
            self._reporting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reporting
        await self._server.stop(grace_s)
        await self._lifecycle.guard.close()

    async def wait(self) -> None:
        await self._server.wait_for_termination()

    async def _set_health(self, status: int) -> None:
        for name in ["", *_SERVICES]:
            await self._health.set(name, status)


def _grpc_server(settings: Settings, backends: Backends, reuse_port: bool) -> grpc.aio.Server:
    return grpc.aio.server(
        # A request that does not parse is refused before anything reads it; callers are
        # checked next; a call let in then runs under the server's bound.
        interceptors=[
            MalformedRequests(),
            *auth_interceptors(settings, backends.credentials),
            ServerDeadlines(settings.deadlines),
        ],
        options=_server_options(settings, reuse_port),
    )


def _server_options(settings: Settings, reuse_port: bool) -> list[tuple[str, int]]:
    # A larger request is RESOURCE_EXHAUSTED before it is read. Answers (a page of tasks at
    # the largest payload) may be larger than any one request.
    send = max(16 * 1024 * 1024, 4 * settings.limits.max_payload_bytes)
    options = [
        ("grpc.max_receive_message_length", settings.limits.max_request_bytes),
        ("grpc.max_send_message_length", send),
    ]
    if reuse_port:
        # gRPC sets SO_REUSEPORT on Linux by default; several processes on one port rely on
        # it, so it is asked for rather than assumed.
        options.append(("grpc.so_reuseport", 1))
    return options


def _add_services(
    server: grpc.aio.Server,
    settings: Settings,
    lifecycle: Lifecycle,
    schedules: Schedules,
    quotas: QuotaGate,
    *,
    telemetry: Telemetry | None,
    keys: DeliveryKeys,
) -> None:
    """The tikk.v1 services (``server.api``) on ``server``; results are checked with
    ``keys``."""
    tasks_pb2_grpc.add_TaskServiceServicer_to_server(
        TaskService(lifecycle, settings, quotas, telemetry), server
    )
    history_pb2_grpc.add_HistoryServiceServicer_to_server(
        HistoryService(lifecycle, settings), server
    )
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(
        WorkerService(lifecycle, settings, keys, telemetry), server
    )
    schedules_pb2_grpc.add_ScheduleServiceServicer_to_server(
        ScheduleService(schedules, quotas), server
    )
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminService(quotas, lifecycle.clock), server)
