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
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from tikk.client.transport import Transport
from tikk.clock import Clock, SystemClock
from tikk.errors import BackendUnavailable
from tikk.v1 import worker_pb2, worker_pb2_grpc
from worker_sdk.commits import CommitBatcher
from worker_sdk.execution import (
    Handler,
    call_handler,
    checked_worker_id,
    set_failure,
    task_context,
)
from worker_sdk.inflight import Held, InFlight, backlog_for
from worker_sdk.intake import Intake, check_queues
from worker_sdk.queues.consumer import GroupTiming, Message, QueueConsumer
from worker_sdk.results import Backoff, ResultStream
from worker_sdk.telemetry import NoTelemetry

log = logging.getLogger("tikk.worker")

H = TypeVar("H", bound=Callable[..., Any])
T = TypeVar("T")
# Answers that reporting again cannot change (google.rpc.Code numbers): the task is not
# running that attempt any more (also a start whose timeout ran out), or the delivery's token
# does not match it. The message is dropped, not reported forever.
_FINAL_REFUSALS = {
    grpc.StatusCode.FAILED_PRECONDITION.value[0],
    grpc.StatusCode.PERMISSION_DENIED.value[0],
}
_CHECK_S = 0.25  # how often a worker with every slot busy, or paused, looks at its reporting
_GATHER_S = 0.01  # how long a full worker waits for more slots to free before it fetches
_CONFIG_TIMEOUT_S = 10.0  # one GetWorkerConfig attempt
# gRPC reconnects with backoff of its own, by default growing to 2 minutes; capped, a worker
# finds a restarted server within about a second.
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class Worker:
    """Runs registered handlers for tasks of ``queues``.

    Async handlers run on the event loop; plain functions run in a thread pool. At most
    ``concurrency`` handlers run at once. A message handed out ``max_deliveries`` times without
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
    ) -> None:
        check_queues(queues)
        self.result_backlog = backlog_for(concurrency, result_backlog)  # checks both
        self.queues = list(queues)
        self.concurrency = concurrency
        self.worker_id = checked_worker_id(worker_id or f"{socket.gethostname()}-{os.getpid()}")
        self._poll_interval_s = poll_interval_s
        self._max_deliveries = max_deliveries
        self._shutdown_timeout_s = shutdown_timeout_s
        self._handlers: dict[str, Handler] = {}
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="handler")
        self.completed = 0
        # Messages whose result the server refused for good (see ``_FINAL_REFUSALS``).
        self.dropped = 0
        # Spans and metrics of runs (``worker_sdk.telemetry.RunTelemetry``); off by default.
        self.telemetry = telemetry or NoTelemetry()
        self._clock = clock
        self._wall_clock = wall_clock or SystemClock()
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

    def handler(self, name: str) -> Callable[[H], H]:
        """Decorator: register the function as the handler called ``name``."""

        def register(fn: H) -> H:
            self.register(name, fn)
            return fn

        return register

    def register(self, name: str, fn: Handler) -> None:
        if not name:
            raise ValueError("handler name must not be empty")
        if name in self._handlers:
            raise ValueError(f"handler {name!r} is already registered")
        self._handlers[name] = fn

    @property
    def handler_names(self) -> list[str]:
        return sorted(self._handlers)

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
        that does not answer yet is asked again until it does (or ``stop`` is set).

        ``transport`` overrides the worker's own; ``TransportError`` if its files cannot be
        read. ``queue_url`` replaces the queue URL the server hands out, which never carries a
        password: a worker on another host names its own password file or variable, or its
        user, there. A queue that refuses the login raises ``BackendRefused``."""
        stop = stop or asyncio.Event()
        channel = (transport or self.transport).aio_channel(server, _CHANNEL_OPTIONS)
        async with channel:
            stub = worker_pb2_grpc.WorkerServiceStub(channel)
            config = await _worker_config(stub, server, stop)
            if config is None:
                return self.completed
            visibility_ms = max(1000, config.visibility_timeout.ToMilliseconds())
            url = queue_url or config.queue_url
            intake = Intake(url, self.queues, visibility_ms, self.group_timing, self._wall_clock)
            out = _Outbound(ResultStream(stub, clock=self._clock), CommitBatcher())
            out.results.start()
            out.commits.start()
            try:
                await self._loop(intake, out, stop, burst, visibility_ms)
            finally:
                await out.commits.close()  # before the consumers they go to close
                await out.results.close()
                await intake.close()
        return self.completed

    async def _loop(
        self,
        intake: Intake,
        out: _Outbound,
        stop: asyncio.Event,
        burst: bool,
        visibility_ms: int,
    ) -> None:
        inflight = InFlight(self.concurrency, self.result_backlog)
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
            run = asyncio.create_task(self._process(consumer, out, message, inflight.ran))
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
        while not stop.is_set() and out.results.waiting_s() > self.report_timeout_s:
            await _sleep_unless(stop, _CHECK_S)
        if not stop.is_set():
            log.warning(
                "results are acknowledged again after a pause of %.1f s: resuming with a "
                "fresh queue consumer",
                self._clock() - paused_at,
            )

    async def _process(
        self, consumer: QueueConsumer, out: _Outbound, message: Message, ran: Callable[[], None]
    ) -> None:
        """Run ``message`` and report its result until the server records it; only then is the
        message committed (with the next batch). ``ran`` frees its handler slot as soon as the
        handler returned: waiting for the server delays no start, only the commit."""
        if not await self._may_start(out.results, message):
            out.commits.add(consumer, message)  # dead-lettered by its start timeout: not run
            return
        result = await self._execute(message)
        ran()
        while True:
            ack = await out.results.report(result)
            if ack.code == grpc.StatusCode.OK.value[0]:
                self.completed += 1
                break
            if ack.code in _FINAL_REFUSALS:
                self.dropped += 1
                d = result.delivery
                log.warning("result of task %s attempt %d refused for good, message dropped: %s",
                            d.task_id, d.attempt, ack.message)  # fmt: skip
                break
            log.warning("server refused result of %s (%s), retrying", result.run_id, ack.message)
            await asyncio.sleep(1.0)
        out.commits.add(consumer, message)

    async def _may_start(self, results: ResultStream, message: Message) -> bool:
        """An attempt with a start timeout runs only once the server granted its start (the
        timeout may have run out, and then it was dead-lettered instead); others always."""
        d = message.delivery
        if not d.HasField("start_timeout"):
            return True
        claim = worker_pb2.RunResult(
            run_id=uuid.uuid4().hex, delivery=d, kind=worker_pb2.RESULT_KIND_STARTED,
            worker_id=self.worker_id,
        )  # fmt: skip
        claim.start_time.FromMilliseconds(self._wall_clock.now_ms())
        while True:
            ack = await results.report(claim)
            if ack.code == grpc.StatusCode.OK.value[0]:
                return True
            if ack.code in _FINAL_REFUSALS:
                log.warning("start of task %s attempt %d refused, message dropped: %s",
                            d.task_id, d.attempt, ack.message)  # fmt: skip
                return False
            log.warning("server could not decide the start of %s (%s), asking again",
                        d.task_id, ack.message)  # fmt: skip
            await asyncio.sleep(1.0)

    async def _execute(self, message: Message) -> worker_pb2.RunResult:
        d = message.delivery
        run_id = os.urandom(16).hex()  # as random as uuid4().hex, without a UUID object per run
        started = self._wall_clock.now_ms()
        result = worker_pb2.RunResult(run_id=run_id, delivery=d, worker_id=self.worker_id)
        result.start_time.FromMilliseconds(started)
        fn = self._handlers.get(d.handler)
        with self.telemetry.run(message, started) as finish:
            if message.delivery_count > self._max_deliveries:
                reason = f"delivered {message.delivery_count} times without a recorded result"
                set_failure(
                    result, worker_pb2.RESULT_KIND_FAILED_PERMANENTLY, "PoisonMessage", reason
                )
            elif fn is None:
                reason = (
                    f"no handler {d.handler!r} on worker {self.worker_id} "
                    f"(registered: {', '.join(self.handler_names) or 'none'})"
                )
                set_failure(
                    result, worker_pb2.RESULT_KIND_FAILED_PERMANENTLY, "UnknownHandler", reason
                )
            else:
                ctx = task_context(message, run_id, self.worker_id)
                await call_handler(fn, ctx, result, self._pool)
            result.finish_time.FromMilliseconds(self._wall_clock.now_ms())
            finish(result)
        return result


@dataclass(frozen=True)
class _Outbound:
    """Where a run's outcome goes: its result to the server, then its message to be
    committed once the server acknowledged the result."""

    results: ResultStream
    commits: CommitBatcher


async def _worker_config(
    stub: Any, server: str, stop: asyncio.Event
) -> worker_pb2.GetWorkerConfigResponse | None:
    """The server's settings for workers. A server that is down or not ready yet is asked
    again with backoff until it answers; None if ``stop`` is set first."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            config: worker_pb2.GetWorkerConfigResponse = await stub.GetWorkerConfig(
                worker_pb2.GetWorkerConfigRequest(), timeout=_CONFIG_TIMEOUT_S
            )
            return config
        except grpc.aio.AioRpcError as exc:
            delay = backoff.next()
            log.warning("server %s %s; asking again in %.1f s", server, _unanswered(exc), delay)
            await _sleep_unless(stop, delay)
    return None


def _unanswered(exc: grpc.aio.AioRpcError) -> str:
    """Why the server gave no configuration, told so that whoever runs the worker can act:
    a refused handshake or credential is not a server that is down."""
    code, details = exc.code(), exc.details() or ""
    if "handshake" in details.lower() or "CERTIFICATE_VERIFY_FAILED" in details:
        return (
            "refused the TLS handshake: check that --tls-ca names the CA of the server's "
            f"certificate and --tls-server-name its name ({code.name}: {details})"
        )
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return f"refused the worker's credential (--token-file or $TIKK_TOKEN): {details}"
    if code is grpc.StatusCode.PERMISSION_DENIED:
        return f"refused the worker: {details}"
    return f"did not answer ({code.name}: {details})"


async def _call_when_set(event: asyncio.Event, *calls: Callable[[], None]) -> None:
    await event.wait()
    for call in calls:
        call()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):  # no task per sleep, unlike wait_for
            await stop.wait()


def _given(value: T | None, current: T) -> T:
    return current if value is None else value
