"""Tracing and metrics of handler runs, through the OpenTelemetry API.

::

    from worker_sdk import Worker
    from worker_sdk.telemetry import RunTelemetry

    worker = Worker(["email"], telemetry=RunTelemetry(tracer_provider, meter_provider))

Each run is a ``run <handler>`` span (kind CONSUMER) that continues the trace the message
carries: the W3C ``traceparent`` header on Kafka, else the context inside the delivery. The
span is current while the handler runs (sync handlers too, in their thread), so spans the
handler starts are its children. Metrics: ``tikk.run.start_lateness`` (histogram, ms from
due time to handler start), ``tikk.runs`` (counter by queue, handler and outcome) and
``tikk.run.duration`` (histogram, ms).

Telemetry is a middleware (``worker_sdk.middleware``), the outermost of the chain: it sees
every run, also one refused before any handler (delivered too often, no such handler), and
the outcome the run's exception means. A run interrupted by the worker's stop is not recorded
(it is delivered again). Without ``telemetry`` a Worker records nothing and does not import
OpenTelemetry. Providers default to the globally configured ones. ``RunMetrics(sinks)``
records the metrics alone (into Prometheus, say: ``tikk worker --metrics``), and
``RunTelemetry(..., sinks=...)`` adds sinks to its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tikk.clock import Clock, SystemClock
from tikk.metric_catalog import RUN_DURATION, RUN_START_LATENESS, RUNS, MetricSink
from tikk.metric_sinks import OtelMetrics
from tikk.queue_contract import trace_carrier
from worker_sdk.context import NonRetryableError, Retry, run_interrupted
from worker_sdk.middleware import Next, RunCall

# Records the end of a run that raised the error given (None: it succeeded).
Ended = Callable[[BaseException | None], None]


def outcome_of(error: BaseException | None) -> str:
    """The outcome label of a run that raised ``error`` (None: it succeeded)."""
    if error is None:
        return "succeeded"
    if isinstance(error, Retry):
        return "retry"
    if isinstance(error, NonRetryableError):
        return "failed_permanently"
    return "failed"


class NoTelemetry:
    """What a Worker without telemetry uses: nothing recorded, nothing imported."""

    async def __call__(self, call: RunCall, call_next: Next) -> bytes:
        return await call_next(call)


class RunMetrics(NoTelemetry):
    """Records each run in the run metrics of ``sinks``, traced nowhere. ``clock`` times the
    run's duration (the system clock by default)."""

    def __init__(self, sinks: Sequence[MetricSink] = (), *, clock: Clock | None = None) -> None:
        self.sinks = tuple(sinks)
        self._clock = clock or SystemClock()

    async def __call__(self, call: RunCall, call_next: Next) -> bytes:
        with self._around(call) as ended:
            error: BaseException | None = None
            try:
                return await call_next(call)
            except BaseException as exc:
                error = exc
                raise
            finally:
                if not run_interrupted():
                    ended(error)

    @contextlib.contextmanager
    def _around(self, call: RunCall) -> Iterator[Ended]:
        """What is open while the run goes on; the yielded function records its end."""
        yield lambda error: self._record(call, outcome_of(error))

    def _record(self, call: RunCall, outcome: str) -> None:
        labels = {"queue": call.ctx.queue, "handler": call.ctx.handler}
        lateness = max(0, call.started_ms - call.delivery.due_time.ToMilliseconds())
        duration = max(0, self._clock.now_ms() - call.started_ms)
        for sink in self.sinks:
            sink.observe(RUN_START_LATENESS, lateness, labels)
            sink.observe(RUN_DURATION, duration, labels)
            sink.add(RUNS, 1, {**labels, "outcome": outcome})


class RunTelemetry(RunMetrics):
    """Records each run as a span and in the run metrics."""

    def __init__(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        *,
        sinks: Sequence[MetricSink] = (),
        clock: Clock | None = None,
    ) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        meters = meter_provider or metrics.get_meter_provider()
        super().__init__([OtelMetrics(meters, "tikk.worker"), *sinks], clock=clock)
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("tikk.worker")

    def _parent(self, call: RunCall) -> Any:
        carrier = trace_carrier(call.headers, call.delivery.trace_context)
        return self._propagator.extract(carrier=carrier) if carrier else None

    @contextlib.contextmanager
    def _around(self, call: RunCall) -> Iterator[Ended]:
        with self._tracer.start_as_current_span(
            f"run {call.ctx.handler}",
            context=self._parent(call),
            kind=self._trace.SpanKind.CONSUMER,
            start_time=call.started_ms * 1_000_000,
            attributes=_attributes(call),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield lambda error: self._finish(span, call, error)

    def _finish(self, span: Any, call: RunCall, error: BaseException | None) -> None:
        outcome = outcome_of(error)
        span.set_attribute("tikk.outcome", outcome)
        if error is not None:
            description = f"{type(error).__name__}: {error}"
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))
        self._record(call, outcome)


def _attributes(call: RunCall) -> dict[str, str | int]:
    ctx = call.ctx
    return {
        "tikk.namespace": ctx.namespace, "tikk.task_id": ctx.task_id, "tikk.queue": ctx.queue,
        "tikk.handler": ctx.handler, "tikk.attempt": ctx.attempt,
        "tikk.idempotency_key": ctx.idempotency_key,
        "tikk.delivery_count": ctx.delivery_count,
        "tikk.lateness_ms": max(0, call.started_ms - call.delivery.due_time.ToMilliseconds()),
    }  # fmt: skip
