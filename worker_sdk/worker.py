"""The Worker: handlers registered on it, a bounded pool of runs, results streamed back.

Lifecycle of ``run``: fetch config from the server (asked again with backoff until it
answers, so a worker may start before its server) → open the queue consumer → open the result
stream → fetch and run tasks (at most ``concurrency`` at once) → on stop, fetch no more, let
in-flight runs finish (up to ``shutdown_timeout_s``), then close the stream and the consumer.
A handler's slot frees when it returns, but its message is committed only after the server
acknowledged its result (at most ``result_backlog`` messages are held, see
``worker_sdk.inflight``); anything not acknowledged is delivered again later. Acknowledged
messages are committed in batches (``worker_sdk.commits``); on stop the last batch goes out
before the consumer closes.

**A worker that cannot report steps aside.** When results have waited longer than
``report_timeout_s`` with nothing acknowledged (the server is gone), the worker fetches no more
and closes its consumer: on Kafka it leaves the consumer groups (a static member, one with an
``instance_id``, is let go after the session instead), so its partitions move to healthy
workers, and what it had not committed is delivered to them (at-least-once). Runs in flight
keep reporting; their commits go to the closed consumer and do nothing. Once results are
acknowledged again it opens a fresh consumer and carries on. Before that it keeps starting runs
(its handler slots free as handlers return), up to ``result_backlog``: by default the
concurrency (nothing more is held than run); a few times that tolerates a server restart of a
few seconds without holding up a start, at the price of more runs repeated after a step aside.

The Worker's parts: ``worker_sdk.intake`` (the current consumer), ``worker_sdk.inflight``
(runs in flight, the result backlog, leases), ``worker_sdk.execution`` (one call of a handler),
``worker_sdk.results`` (the result stream) and ``worker_sdk.commits`` (batched commits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from tikk.client.transport import Transport
from tikk.clock import Clock, SystemClock
from tikk.errors import BackendUnavailable
from tikk.v1 import worker_pb2, worker_pb2_grpc
from worker_sdk.background import beside
from worker_sdk.cancellations import CancelWatch
from worker_sdk.commits import CommitBatcher
from worker_sdk.context import TaskContext
from worker_sdk.execution import (
    PoisonMessage,
    UnknownHandler,
    call_handler,
    checked_worker_id,
    handler_link,
    refusal_link,
    task_context,
)
from worker_sdk.gates import HandlerGates
from worker_sdk.handlers import HandlerOptions, HandlerSpec, handler_spec
from worker_sdk.inflight import Held, InFlight, backlog_for
from worker_sdk.intake import Intake, check_queues
from worker_sdk.lead import ServerClock, probe, until_due
from worker_sdk.middleware import Middleware, Next, RunCall
from worker_sdk.queues.consumer import GroupTiming, Message, QueueConsumer
from worker_sdk.reporting import may_start, report_until_settled
from worker_sdk.results import ResultStream
from worker_sdk.server_config import sleep_unless, worker_config
from worker_sdk.telemetry import NoTelemetry

log = logging.getLogger("tikk.worker")

H = TypeVar("H", bound=Callable[..., Any])
T = TypeVar("T")
_CHECK_S = 0.25  # how often a worker with every slot busy, or paused, looks at its reporting
_GATHER_S = 0.01  # how long a full worker waits for more slots to free before it fetches
# gRPC reconnects with backoff of its own, by default growing to 2 minutes; capped, a worker
# finds a restarted server within about a second.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class Worker:
    """Runs registered handlers for tasks of ``queues``.

    Async handlers run on the event loop; plain functions run in a thread pool. At most
    ``concurrency`` handlers run at once; a handler may have limits and a timeout of its own
    (``handler``'s options, ``worker_sdk.handlers``), and its payload a type
    (``worker_sdk.handlers``). ``middleware`` runs around every run, outermost first, inside
    ``telemetry`` (``worker_sdk.middleware``). A message handed out ``max_deliveries`` times without
    a recorded result (it keeps killing workers) is dead-lettered instead of run again.
    ``result_backlog`` bounds the messages held, running or with a result not yet
    acknowledged (``worker_sdk.inflight``: as many as ``concurrency`` by default); when it is
    full the worker fetches nothing until the server acknowledges results again. An idle
    worker fetches again when the queue says messages arrived (the embedded queue's doorbell,
    ``tikk.queue_doorbell``), and at the latest every ``poll_interval_s``.

    Failover (see the module docstring): ``session_timeout_s`` and ``heartbeat_interval_s``
    are the consumer-group timing on Kafka (a killed worker's partitions move after about the
    session; the heartbeat must be under a third of it); ``report_timeout_s`` is how long
    results may go unacknowledged before the worker steps aside. ``clock`` (monotonic
    seconds) times that. ``instance_id`` (none by default) is a stable name of this worker's
    place in the Kafka consumer groups (static membership): a worker restarted with it takes
    its partitions back without a rebalance, if it returns within the session; no two live
    workers may share one. ``wall_clock`` (``tikk.clock.Clock``, the system clock by default)
    stamps when runs start and finish, and times the local queue's leases. ``transport``
    (``tikk.client.Transport``) says how to reach the server: TLS, a client certificate, a
    bearer token; ``run`` may override it.
    """

    # The result stream of the current ``run`` (None between runs): what ``reporting`` asks.
    _results: ResultStream | None = None

    def __init__(
        self,
        queues: Sequence[str],
        *,
        concurrency: int = 16,
        worker_id: str | None = None,
        poll_interval_s: float = 0.025,
        max_deliveries: int = 10,
        shutdown_timeout_s: float = 30.0,
        telemetry: NoTelemetry | None = None,
        session_timeout_s: float = 6.0,
        heartbeat_interval_s: float = 1.0,
        report_timeout_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
        transport: Transport | None = None,
        wall_clock: Clock | None = None,
        result_backlog: int | None = None,
        instance_id: str | None = None,
        middleware: Sequence[Middleware] = (),
    ) -> None:
        check_queues(queues)
        self.result_backlog = backlog_for(concurrency, result_backlog)  # checks both
        self.queues = list(queues)
        self.concurrency = concurrency
        self.worker_id = checked_worker_id(worker_id or f"{socket.gethostname()}-{os.getpid()}")
        self._poll_interval_s, self._max_deliveries = poll_interval_s, max_deliveries
        self._shutdown_timeout_s = shutdown_timeout_s
        self._handlers: dict[str, HandlerSpec] = {}
        self.middleware = list(middleware)  # outermost first, after the telemetry
        self._gates, self._inflight = HandlerGates(clock), InFlight(concurrency, concurrency)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="handler")
        self.completed = self.dropped = 0  # results recorded / refused for good
        self.telemetry = telemetry or NoTelemetry()  # spans and metrics of runs; off by default
        self._clock, self._wall_clock = clock, wall_clock or SystemClock()
        self.server_clock = ServerClock(self._wall_clock, clock)
        # Runs whose task is cancelled while they go on are stopped (``cancels.every_s``).
        self.cancels = CancelWatch(clock=clock)
        # How ``run`` reaches the server (TLS, client certificate, token); plaintext if None.
        self.transport = transport or Transport()
        self._set_failover(session_timeout_s, heartbeat_interval_s, report_timeout_s, instance_id)

    def set_failover(
        self,
        *,
        session_timeout_s: float | None = None,
        heartbeat_interval_s: float | None = None,
        report_timeout_s: float | None = None,
        instance_id: str | None = None,
    ) -> None:
        """Change the failover options given to the constructor (the ``tikk worker`` flags
        land here); what is None stays. Raises ``ValueError`` naming a bad value or
        combination, and then changes nothing."""
        now = self.group_timing
        self._set_failover(
            _given(session_timeout_s, now.session_timeout_ms / 1000),
            _given(heartbeat_interval_s, now.heartbeat_interval_ms / 1000),
            _given(report_timeout_s, self.report_timeout_s),
            _given(instance_id, now.instance_id),
        )

    def _set_failover(
        self, session_s: float, heartbeat_s: float, report_s: float, instance_id: str | None
    ) -> None:
        """Validate them all first (``GroupTiming`` checks its own), then set them."""
        if report_s <= 0:
            raise ValueError(f"report timeout must be positive (got {report_s} s)")
        session_ms, heartbeat_ms = round(session_s * 1000), round(heartbeat_s * 1000)
        self.group_timing = GroupTiming(session_ms, heartbeat_ms, instance_id=instance_id)
        self.report_timeout_s = report_s

    def handler(
        self,
        name: str,
        *,
        timeout_s: float | None = None,
        concurrency: int | None = None,
        concurrency_per_label: Mapping[str, int] | None = None,
        rate_per_s: float | None = None,
    ) -> Callable[[H], H]:
        """Decorator: register the function as the handler called ``name``, with its own
        limits (``worker_sdk.handlers.HandlerOptions``)."""
        options = HandlerOptions(timeout_s, concurrency, concurrency_per_label or {}, rate_per_s)

        def register(fn: H) -> H:
            self.register(name, fn, options)
            return fn

        return register

    def register(
        self, name: str, fn: Callable[..., Any], options: HandlerOptions | None = None
    ) -> None:
        """Register ``fn`` as the handler ``name``; ``ValueError`` if the name is taken or
        ``fn`` does not take ``(ctx, payload)`` (``worker_sdk.handlers``)."""
        if name in self._handlers:
            raise ValueError(f"handler {name!r} is already registered")
        self._handlers[name] = handler_spec(name, fn, options or HandlerOptions())

    @property
    def handler_names(self) -> list[str]:
        return sorted(self._handlers)

    def reporting(self) -> bool:
        """Whether results reach a server now: ``run`` has a result call open and the server
        acknowledged within ``report_timeout_s`` (what ``tikk worker``'s ``/readyz`` asks)."""
        results = self._results
        if results is None or not results.connected():
            return False
        return results.waiting_s() <= self.report_timeout_s

    async def run(
        self,
        server: str,
        *,
        burst: bool = False,
        stop: asyncio.Event | None = None,
        transport: Transport | None = None,
        queue_url: str | None = None,
    ) -> int:
        """Work until ``stop`` is set (or, with ``burst``, until the queues are empty and
        nothing is in flight). Returns the number of runs whose result was recorded. A server
        that does not answer yet is asked again until it does (or ``stop`` is set); given
        several (``tikk.client.server_list``), the result stream leaves one that is lost.

        ``transport`` overrides the worker's own; ``TransportError`` if its files cannot be
        read. ``queue_url`` replaces the queue URL the server hands out, which never carries a
        password: a worker on another host names its own password file or variable, or its
        user, there. A queue that refuses the login raises ``BackendRefused``."""
        stop = stop or asyncio.Event()
        channel = (transport or self.transport).aio_channel(server, _CHANNEL_OPTIONS)
        async with channel:
            stub = worker_pb2_grpc.WorkerServiceStub(channel)
            config = await worker_config(stub, server, stop)
            if config is None:
                return self.completed
            self.server_clock.sample(config)
            visibility_ms = max(1000, config.visibility_timeout.ToMilliseconds())
            url = queue_url or config.queue_url
            intake = Intake(url, self.queues, visibility_ms, self.group_timing, self._wall_clock)
            try:
                # Beside the loop: cancels of running tasks; the server's clock, read again.
                async with (
                    self._outbound(stub) as out,
                    beside(self.cancels.watch(stub), probe(stub, self.server_clock)),
                ):
                    await self._loop(intake, out, stop, burst, visibility_ms)
            finally:
                await intake.close()  # after the commits that go to its consumers
        return self.completed

    @contextlib.asynccontextmanager
    async def _outbound(self, stub: Any) -> AsyncIterator[_Outbound]:
        """The result stream and the commit batches of one ``run``, started; on the way out
        the last commits go first, then the stream closes."""
        out = _Outbound(ResultStream(stub, clock=self._clock), CommitBatcher())
        out.results.start()
        out.commits.start()
        self._results = out.results
        try:
            yield out
        finally:
            await out.commits.close()
            self._results = None
            await out.results.close()

    async def _loop(
        self,
        intake: Intake,
        out: _Outbound,
        stop: asyncio.Event,
        burst: bool,
        visibility_ms: int,
    ) -> None:
        inflight = self._inflight = InFlight(self.concurrency, self.result_backlog)
        renewer = asyncio.create_task(inflight.renew(visibility_ms / 3000))
        stopping = asyncio.create_task(_call_when_set(stop, inflight.wake, intake.wake))
        try:
            while not stop.is_set():
                if out.results.waiting_s() > self.report_timeout_s:
                    await self._step_aside(intake, out, stop)
                    continue
                started = await self._start_runs(intake, out, inflight)
                if burst and not started and not inflight:
                    break
                if not inflight.free:
                    # Wake early to notice results that go unacknowledged (``_step_aside``).
                    await inflight.until_free(1, _CHECK_S)
                    # Then gather freed slots a moment: a burst is leased in batches, not a
                    # queue transaction per message, at a cost of at most _GATHER_S of delay.
                    await inflight.until_free(max(1, self.concurrency // 4), _GATHER_S)
                elif not started:
                    await intake.idle(self._poll_interval_s)
            await inflight.drain(self._shutdown_timeout_s)
        finally:
            renewer.cancel()
            stopping.cancel()
            inflight.cancel()

    async def _start_runs(
        self,
        intake: Intake,
        out: _Outbound,
        inflight: InFlight,
    ) -> int:
        """Fetch for the free slots and start a run of each message; how many started. A
        queue that is briefly unreachable is retried, not fatal to the worker."""
        if inflight.free < 1:
            return 0
        try:
            consumer = await intake.consumer()
            messages = await consumer.fetch(inflight.free)
        except BackendUnavailable as exc:
            log.warning("fetching from the queue failed, retrying: %s", exc)
            await asyncio.sleep(1.0)
            return 0
        for message in messages:
            run = asyncio.create_task(self._process(consumer, out, message, inflight))
            inflight.add(run, Held(consumer, message))
        return len(messages)

    async def _step_aside(self, intake: Intake, out: _Outbound, stop: asyncio.Event) -> None:
        """Results went unacknowledged for longer than ``report_timeout_s``: fetch no more and
        close the consumer, so that the queue gives this worker's share to others, until
        results are acknowledged again (or ``stop``). Runs in flight keep reporting."""
        log.warning(
            "no result acknowledged for %.1f s (report timeout %.1f s): pausing; the queue "
            "consumer is closed so that other workers take over",
            out.results.waiting_s(),
            self.report_timeout_s,
        )
        paused_at = self._clock()
        await out.commits.flush()  # what was acknowledged is not handed to others again
        await intake.close()
        self._inflight.drop_early()
        while not stop.is_set() and out.results.waiting_s() > self.report_timeout_s:
            await sleep_unless(stop, _CHECK_S)
        if not stop.is_set():
            log.warning(
                "results are acknowledged again after a pause of %.1f s: resuming with a "
                "fresh queue consumer",
                self._clock() - paused_at,
            )

    async def _process(
        self, consumer: QueueConsumer, out: _Outbound, message: Message, inflight: InFlight
    ) -> None:
        """Run ``message`` once it is due and report its result until the server records it;
        only then is the message committed (with the next batch). Its handler slot frees as
        soon as the handler returned: waiting for the server delays no start, only the commit."""
        if self.server_clock.now_ms() < message.delivery.due_time.ToMilliseconds():
            await inflight.hold_early(until_due(self.server_clock, message.delivery))
        now_ms = self._wall_clock.now_ms()
        if not await may_start(out.results, message, self.worker_id, now_ms):
            out.commits.add(consumer, message)  # dead-lettered by its start timeout: not run
            return
        result = await self.execute(message)
        inflight.ran()
        if await report_until_settled(out.results, result):
            self.completed += 1
        else:
            self.dropped += 1
        out.commits.add(consumer, message)

    async def execute(self, message: Message) -> worker_pb2.RunResult:
        """Run ``message`` down the middleware chain to its handler, within the handler's
        limits, and return the result to report; reports nothing itself (the test harness,
        ``worker_sdk.testing``, calls it too)."""
        d = message.delivery
        run_id = os.urandom(16).hex()  # as random as uuid4().hex, without a UUID object per run
        result = worker_pb2.RunResult(run_id=run_id, delivery=d, worker_id=self.worker_id)
        spec, last = self._last_link(message)
        ctx = task_context(message, run_id, self.worker_id)
        async with self._admitted(spec, ctx):
            started = self._wall_clock.now_ms()
            result.start_time.FromMilliseconds(started)
            call = RunCall(ctx, d.payload, message.headers, d, started)
            self.cancels.started(ctx, d)
            try:
                await call_handler([self.telemetry, *self.middleware], last, call, result)
            finally:
                self.cancels.ended(ctx)
            result.finish_time.FromMilliseconds(self._wall_clock.now_ms())
        return result

    def _last_link(self, message: Message) -> tuple[HandlerSpec | None, Next]:
        """The handler of ``message`` and the end of its chain: the handler, or the refusal
        of a message delivered too often or for a handler this worker lacks."""
        d, spec = message.delivery, self._handlers.get(message.delivery.handler)
        if message.delivery_count > self._max_deliveries:
            reason = f"delivered {message.delivery_count} times without a recorded result"
            return None, refusal_link(PoisonMessage(reason))
        if spec is None:
            reason = (
                f"no handler {d.handler!r} on worker {self.worker_id} "
                f"(registered: {', '.join(self.handler_names) or 'none'})"
            )
            return None, refusal_link(UnknownHandler(reason))
        return spec, handler_link(spec, self._pool)

    @contextlib.asynccontextmanager
    async def _admitted(self, spec: HandlerSpec | None, ctx: TaskContext) -> AsyncIterator[None]:
        """Hold the run until its handler's limits let it start (``worker_sdk.gates``); it
        holds no handler slot while it waits."""
        if spec is None or not spec.options.gated:
            yield
            return
        inflight = self._inflight
        inflight.waiting()
        try:
            async with self._gates.admit(spec, ctx.labels):
                inflight.admitted()
                yield
        finally:
            inflight.admitted()


@dataclass(frozen=True)
class _Outbound:
    """Where a run's outcome goes: its result to the server, then its message to be
    committed once the server acknowledged the result."""

    results: ResultStream
    commits: CommitBatcher


async def _call_when_set(event: asyncio.Event, *calls: Callable[[], None]) -> None:
    await event.wait()
    for call in calls:
        call()


def _given(value: T | None, current: T) -> T:
    return current if value is None else value
