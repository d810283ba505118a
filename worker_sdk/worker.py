"""The Worker: handlers registered on it, a bounded pool of runs, results streamed back.

Lifecycle of ``run``: fetch config from the server → open the queue consumer → open the
result stream → fetch and run tasks (at most ``concurrency`` at once) → on stop, fetch no
more, let in-flight runs finish (up to ``shutdown_timeout_s``), then close the stream and the
consumer. A message is committed only after the server acknowledged its result; anything not
acknowledged is delivered again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc

from tikk.errors import BackendUnavailable
from tikk.v1 import worker_pb2, worker_pb2_grpc
from worker_sdk.consumer import Message, QueueConsumer, open_consumer
from worker_sdk.context import NonRetryableError, Retry, TaskContext
from worker_sdk.results import ResultStream
from worker_sdk.telemetry import NoTelemetry

log = logging.getLogger("tikk.worker")

Handler = (
    Callable[[TaskContext, bytes], Awaitable[bytes | None]]
    | Callable[[TaskContext, bytes], bytes | None]
)
H = TypeVar("H", bound=Callable[..., Any])
_ERROR_MESSAGE_LIMIT = 4096


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _ts_ms(ms: int) -> Any:
    from google.protobuf.timestamp_pb2 import Timestamp

    ts = Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def _dt(ts: Any) -> datetime:
    return datetime.fromtimestamp(ts.ToMilliseconds() / 1000, tz=UTC)


class Worker:
    """Runs registered handlers for tasks of ``queues``.

    Async handlers run on the event loop; plain functions run in a thread pool. At most
    ``concurrency`` runs are in flight. A message handed out ``max_deliveries`` times without
    a recorded result (it keeps killing workers) is dead-lettered instead of run again.
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
    ) -> None:
        if not queues:
            raise ValueError("a Worker needs at least one queue")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.queues = list(queues)
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self._poll_interval_s = poll_interval_s
        self._max_deliveries = max_deliveries
        self._shutdown_timeout_s = shutdown_timeout_s
        self._handlers: dict[str, Handler] = {}
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="handler")
        self.completed = 0
        # Spans and metrics of runs (``worker_sdk.telemetry.RunTelemetry``); off by default.
        self.telemetry = telemetry or NoTelemetry()

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
        self, server: str, *, burst: bool = False, stop: asyncio.Event | None = None
    ) -> int:
        """Work until ``stop`` is set (or, with ``burst``, until the queues are empty and
        nothing is in flight). Returns the number of runs whose result was recorded."""
        stop = stop or asyncio.Event()
        async with grpc.aio.insecure_channel(server) as channel:
            stub = worker_pb2_grpc.WorkerServiceStub(channel)
            config = await stub.GetWorkerConfig(
                worker_pb2.GetWorkerConfigRequest(), wait_for_ready=True, timeout=30
            )
            visibility_ms = max(1000, config.visibility_timeout.ToMilliseconds())
            consumer = open_consumer(config.queue_url, self.queues, visibility_ms)
            results = ResultStream(stub)
            results.start()
            try:
                await self._loop(consumer, results, stop, burst, visibility_ms)
            finally:
                await results.close()
                await consumer.close()
        return self.completed

    async def _loop(
        self,
        consumer: QueueConsumer,
        results: ResultStream,
        stop: asyncio.Event,
        burst: bool,
        visibility_ms: int,
    ) -> None:
        inflight: dict[asyncio.Task[None], Message] = {}
        renewer = asyncio.create_task(self._renew(consumer, inflight, visibility_ms / 3000))
        try:
            while not stop.is_set():
                free = self.concurrency - len(inflight)
                messages = await self._fetch(consumer, free) if free else []
                for message in messages:
                    task = asyncio.create_task(self._process(consumer, results, message))
                    inflight[task] = message
                    task.add_done_callback(inflight.pop)
                if burst and not messages and not inflight:
                    break
                if not free:
                    # Every slot is busy: wake as soon as one frees (or on stop).
                    stopper = asyncio.ensure_future(stop.wait())
                    await asyncio.wait([stopper, *inflight], return_when="FIRST_COMPLETED")
                    stopper.cancel()
                elif not messages:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self._poll_interval_s)
            if inflight:
                await asyncio.wait(list(inflight), timeout=self._shutdown_timeout_s)
        finally:
            renewer.cancel()
            for task in list(inflight):
                task.cancel()

    async def _fetch(self, consumer: QueueConsumer, free: int) -> list[Message]:
        """A queue that is briefly unreachable is retried, not fatal to the worker."""
        try:
            return await consumer.fetch(free)
        except BackendUnavailable as exc:
            log.warning("fetching from the queue failed, retrying: %s", exc)
            await asyncio.sleep(1.0)
            return []

    async def _renew(
        self, consumer: QueueConsumer, inflight: dict[asyncio.Task[None], Message], every: float
    ) -> None:
        while True:
            await asyncio.sleep(every)
            if inflight:
                with contextlib.suppress(Exception):
                    await consumer.extend(list(inflight.values()))

    async def _process(
        self, consumer: QueueConsumer, results: ResultStream, message: Message
    ) -> None:
        result = await self._execute(message)
        while True:
            ack = await results.report(result)
            if ack.code == grpc.StatusCode.OK.value[0]:
                break
            log.warning("server refused result of %s (%s), retrying", result.run_id, ack.message)
            await asyncio.sleep(1.0)
        await consumer.commit(message)
        self.completed += 1

    async def _execute(self, message: Message) -> worker_pb2.RunResult:
        d = message.delivery
        run_id = uuid.uuid4().hex
        started = _now_ms()
        result = worker_pb2.RunResult(
            run_id=run_id, delivery=d, worker_id=self.worker_id, start_time=_ts_ms(started)
        )
        fn = self._handlers.get(d.handler)
        with self.telemetry.run(message, started) as finish:
            if message.delivery_count > self._max_deliveries:
                reason = f"delivered {message.delivery_count} times without a recorded result"
                _fail(result, worker_pb2.RESULT_KIND_FAILED_PERMANENTLY, "PoisonMessage", reason)
            elif fn is None:
                reason = (
                    f"no handler {d.handler!r} on worker {self.worker_id} "
                    f"(registered: {', '.join(self.handler_names) or 'none'})"
                )
                _fail(result, worker_pb2.RESULT_KIND_FAILED_PERMANENTLY, "UnknownHandler", reason)
            else:
                await self._invoke(fn, self._context(message, run_id), result)
            result.finish_time.CopyFrom(_ts_ms(_now_ms()))
            finish(result)
        return result

    async def _invoke(self, fn: Handler, ctx: TaskContext, result: worker_pb2.RunResult) -> None:
        try:
            if inspect.iscoroutinefunction(fn):
                output = await fn(ctx, result.delivery.payload)
            else:
                # In the caller's context, so the run span is current in the handler's thread.
                run = contextvars.copy_context().run
                call = functools.partial(run, fn, ctx, result.delivery.payload)
                output = await asyncio.get_running_loop().run_in_executor(self._pool, call)
            if output is not None and not isinstance(output, bytes):
                raise TypeError(f"handler returned {type(output).__name__}, expected bytes|None")
            result.kind = worker_pb2.RESULT_KIND_SUCCEEDED
            result.output = output or b""
        except Retry as exc:
            _fail(result, worker_pb2.RESULT_KIND_RETRY, "Retry", str(exc))
            result.retry_after.FromMilliseconds(int(exc.after_seconds * 1000))
        except NonRetryableError as exc:
            _fail(result, worker_pb2.RESULT_KIND_FAILED_PERMANENTLY, type(exc).__name__, str(exc))
        except Exception as exc:
            log.debug("handler %s failed: %s", ctx.handler, traceback.format_exc())
            _fail(result, worker_pb2.RESULT_KIND_FAILED, type(exc).__name__, str(exc))

    def _context(self, message: Message, run_id: str) -> TaskContext:
        d = message.delivery
        return TaskContext(
            namespace=d.namespace,
            task_id=d.task_id,
            queue=d.queue,
            handler=d.handler,
            run_id=run_id,
            attempt=d.attempt,
            max_attempts=d.max_attempts,
            scheduled_time=_dt(d.scheduled_time),
            due_time=_dt(d.due_time),
            fired_time=_dt(d.fired_time),
            idempotency_key=d.idempotency_key,
            labels=dict(d.labels),
            worker_id=self.worker_id,
            delivery_count=message.delivery_count,
        )


def _fail(result: worker_pb2.RunResult, kind: int, error_type: str, message: str) -> None:
    result.kind = kind  # type: ignore[assignment]
    result.error_type = error_type
    result.error_message = message[:_ERROR_MESSAGE_LIMIT]
