"""Assembly of the gRPC server: the operations (``server.ops``) over the backends, the services
(``server.api``) over the operations, the interceptor chain, health, reflection, graceful stop.

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
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from server.api.admin import AdminService
from server.api.bulk import BulkService
from server.api.history import HistoryService
from server.api.schedules import ScheduleService
from server.api.tasks import TaskService
from server.api.worker import WorkerService
from server.auth.interceptor import auth_interceptors
from server.backlog_report import report_backlog
from server.interceptors.deadlines import CallDeadlines
from server.interceptors.decoding import MalformedRequests
from server.interceptors.spans import CallSpans
from server.interceptors.statuses import ErrorStatuses
from server.listen_address import address_taken
from server.ops.admin import AdminOps
from server.ops.bulk_actions import BulkActions, runner_id
from server.ops.history import HistoryOps
from server.ops.late_writes import LateWriteGuard
from server.ops.queues import QueueOps
from server.ops.quotas import QuotaGate
from server.ops.results import ResultRecorder
from server.ops.retention import RetentionPrune
from server.ops.schedules import ScheduleOps
from server.ops.start_timeouts import StartTimeouts
from server.ops.task_search import TaskSearch
from server.ops.tasks import TaskOps
from server.ops.upcoming import UpcomingCounts
from server.reflection import serve_reflection
from server.transport_security import check_transport, server_credentials
from server.wiring import Backends
from tikk.client.server_list import PING_INTERVAL_MS
from tikk.clock import Clock
from tikk.delivery_tokens import DeliveryKeys
from tikk.settings import Settings
from tikk.store.credentials import CredentialStore
from tikk.telemetry import Telemetry
from tikk.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    bulk_pb2,
    bulk_pb2_grpc,
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
    bulk_pb2.DESCRIPTOR.services_by_name["BulkService"].full_name,
]


class ApiServer:
    """The tikk API on one port. ``start`` binds and returns the port actually bound.
    ``reuse_port``: the other members of a group bind the same port and the kernel spreads
    connections; without it, the port is this server's alone."""

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
            if telemetry is not None and telemetry.metering
            else None
        )
        self._reporting: asyncio.Task[None] | None = None
        self._counting: asyncio.Task[None] | None = None
        self._bulk: asyncio.Task[None] | None = None
        self._pruning: asyncio.Task[None] | None = None
        telemetry = telemetry or Telemetry()
        self._server = grpc.aio.server(
            interceptors=interceptor_chain(settings, backends.credentials, telemetry),
            options=_server_options(settings, reuse_port),
        )
        self._ops = Operations.over(
            backends, settings, clock, rng=rng, telemetry=telemetry, keys=keys
        )
        _add_services(self._server, self._ops, settings, clock, telemetry)
        # grpc-stubs predates the asyncio health servicer.
        self._health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        serve_reflection(self._server, [*_SERVICES, health.SERVICE_NAME])
        self.port = 0

    @property
    def ops(self) -> Operations:
        """The operations this server's services call (the console calls them too)."""
        return self._ops

    async def start(self) -> int:
        check_transport(self.settings)
        # Bound before anything starts: an address in use is refused with nothing to undo.
        self.port = self._bind()
        await self._ops.guard.start()
        await self._server.start()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        if self._report_backlog is not None:
            self._reporting = asyncio.create_task(self._report_backlog())
        self._counting = asyncio.create_task(self._ops.upcoming.run(), name="tikk-due-counts")
        self._bulk = asyncio.create_task(self._ops.bulk.run(), name="tikk-bulk-actions")
        self._pruning = asyncio.create_task(self._ops.retention.run(), name="tikk-retention")
        return self.port

    def _bind(self) -> int:
        """The port, TLS when the settings give a certificate (``server.transport_security``);
        ``FailedPrecondition`` naming the address when it cannot be bound (in use, most
        often: ``server.listen_address``)."""
        listen, tls = self.settings.listen, self.settings.security.tls
        try:
            if tls is None:
                port = self._server.add_insecure_port(listen)
            else:
                port = self._server.add_secure_port(listen, server_credentials(tls))
        except RuntimeError as exc:  # gRPC's "Failed to bind to address ..."
            raise address_taken(listen, str(exc)) from None
        if port == 0:  # how gRPC said it before it raised
            raise address_taken(listen, "no address could be bound")
        return port

    async def stop(self, grace_s: float = 5.0) -> None:
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        # A bulk action resumes from its last step; a prune deletes in whole transactions.
        for running in (self._reporting, self._bulk, self._pruning):
            if running is not None:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        await self._server.stop(grace_s)
        if self._counting is not None:  # after the calls: what they counted is written
            self._counting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._counting
        await self._ops.guard.close()

    async def wait(self) -> None:
        await self._server.wait_for_termination()

    async def _set_health(self, status: int) -> None:
        for name in ["", *_SERVICES]:
            await self._health.set(name, status)


def interceptor_chain(
    settings: Settings, credentials: CredentialStore | None, telemetry: Telemetry
) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
    """A request that does not parse is refused before anything reads it; callers are
    checked next (when ``settings`` turn authentication on); a call let in is traced (when
    telemetry is on), runs within the server's bounds, and what its servicer raises becomes
    its status."""
    traced: list[grpc.aio.ServerInterceptor[Any, Any]] = (
        [CallSpans(telemetry)] if telemetry.tracing else []
    )
    return [
        MalformedRequests(),
        *auth_interceptors(settings, credentials, telemetry),
        *traced,
        CallDeadlines(settings.deadlines),
        ErrorStatuses(),
    ]


def _server_options(settings: Settings, reuse_port: bool) -> list[tuple[str, int]]:
    # A larger request is RESOURCE_EXHAUSTED before it is read. Answers (a page of tasks at
    # the largest payload) may be larger than any one request.
    send = settings.limits.max_answer_bytes
    options = [
        ("grpc.max_receive_message_length", settings.limits.max_request_bytes),
        ("grpc.max_send_message_length", send),
    ]
    # gRPC sets SO_REUSEPORT on Linux by default, with which a second server on this address
    # would start without error and take a share of its callers. Only the members of one
    # group share a port (their supervisor checked it was free: ``server.listen_address``).
    options.append(("grpc.so_reuseport", 1 if reuse_port else 0))
    # Clients given several servers ping the connections of their calls to notice a server
    # gone silent (``tikk.client.server_list``); by default gRPC would answer pings that
    # often on a quiet call (a worker's idle result stream) with GOAWAY "too_many_pings".
    permitted_ms = PING_INTERVAL_MS - 1_000  # slack for a ping sent a little early
    options.append(("grpc.http2.min_ping_interval_without_data_ms", permitted_ms))
    return options


@dataclass(frozen=True)
class Operations:
    """The operations of one server process (``server.ops``), over its backends."""

    tasks: TaskOps
    results: ResultRecorder
    schedules: ScheduleOps
    history: HistoryOps
    admin: AdminOps
    # Every due row the operations write goes through it; it reads the cursors while serving.
    guard: LateWriteGuard
    # The due counts the writes change (the console's upcoming view); flushed while serving.
    upcoming: UpcomingCounts
    # Reads what a task filter selects; bulk actions act on it, run while serving.
    search: TaskSearch
    bulk: BulkActions
    # Deletes what the namespaces' retention no longer keeps, while serving.
    retention: RetentionPrune
    queues: QueueOps

    @classmethod
    def over(
        cls, backends: Backends, settings: Settings, clock: Clock, *, rng: random.Random,
        telemetry: Telemetry, keys: DeliveryKeys,
    ) -> Operations:  # fmt: skip
        b = backends
        guard = LateWriteGuard(
            b.store, clock, grace_ms=settings.late_write_grace_ms, telemetry=telemetry
        )
        quotas = QuotaGate(b.quotas, b.schedules, clock, settings.quotas)
        schedules = ScheduleOps(
            b.schedules, b.store, b.history, clock, settings.limits, queue=b.queue, quotas=quotas
        )
        expiry = StartTimeouts(b.store, b.history, b.queue, telemetry)
        upcoming = UpcomingCounts(b.due_counts, clock)
        results = ResultRecorder(
            b.store, b.history, b.queue, clock, guard=guard, expiry=expiry, keys=keys,
            limits=settings.limits, rng=rng, telemetry=telemetry, schedules=schedules,
            upcoming=upcoming,
        )  # fmt: skip
        tasks = TaskOps(b.store, b.queue, clock, guard=guard, quotas=quotas, upcoming=upcoming)
        admin = AdminOps(b.quotas, quotas, clock)
        search = TaskSearch(b.store, clock)
        bulk = BulkActions(b.bulk_actions, search, tasks, clock, quotas=b.quotas, owner=runner_id())
        retention = RetentionPrune(b.store, b.history, b.quotas, quotas, clock=clock)
        return cls(
            tasks, results, schedules, HistoryOps(b.history), admin, guard, upcoming, search,
            bulk, retention, QueueOps(b.queue, b.queue_holds, clock),
        )  # fmt: skip


def _add_services(
    server: grpc.aio.Server,
    ops: Operations,
    settings: Settings,
    clock: Clock,
    telemetry: Telemetry,
) -> None:
    """The tikk.v1 services (``server.api``) on ``server``."""
    tasks_pb2_grpc.add_TaskServiceServicer_to_server(
        TaskService(ops.tasks, ops.search, ops.queues, settings, clock, telemetry=telemetry), server
    )
    history_pb2_grpc.add_HistoryServiceServicer_to_server(
        HistoryService(ops.history, ops.tasks, settings, clock), server
    )
    worker_pb2_grpc.add_WorkerServiceServicer_to_server(
        WorkerService(ops.results, ops.tasks, settings, clock), server
    )
    schedules_pb2_grpc.add_ScheduleServiceServicer_to_server(
        ScheduleService(ops.schedules, settings, clock), server
    )
    admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminService(ops.admin), server)
    bulk_pb2_grpc.add_BulkServiceServicer_to_server(
        BulkService(ops.bulk, ops.search, settings), server
    )
