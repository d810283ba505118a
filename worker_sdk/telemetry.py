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

Without ``telemetry`` a Worker records nothing and does not import OpenTelemetry. Providers
default to the globally configured ones. ``RunMetrics(sinks)`` records the metrics alone (into
Prometheus, say: ``tikk worker --metrics``), and ``RunTelemetry(..., sinks=...)`` adds sinks
to its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tikk.metric_catalog import RUN_DURATION, RUN_START_LATENESS, RUNS, MetricSink
from tikk.metric_sinks import OtelMetrics
from tikk.queue_contract import trace_carrier
from tikk.v1 import worker_pb2
from worker_sdk.queues.consumer import Message

_OUTCOMES = {
    worker_pb2.RESULT_KIND_SUCCEEDED: "succeeded",
    worker_pb2.RESULT_KIND_FAILED: "failed",
    worker_pb2.RESULT_KIND_RETRY: "retry",
    worker_pb2.RESULT_KIND_FAILED_PERMANENTLY: "failed_permanently",
}

Finish = Callable[[worker_pb2.RunResult], None]


class NoTelemetry:
    """What a Worker without telemetry uses: nothing recorded, nothing imported."""

    @contextlib.contextmanager
    def run(self, message: Message, started_ms: int) -> Iterator[Finish]:
        """Around one run; call the yielded function with the run's result."""
        yield _ignore


def _ignore(result: worker_pb2.RunResult) -> None:
    pass


class RunMetrics(NoTelemetry):
    """Records each run in the run metrics of ``sinks``, traced nowhere."""

    def __init__(self, sinks: Sequence[MetricSink] = ()) -> None:
        self.sinks = tuple(sinks)

    @contextlib.contextmanager
    def run(self, message: Message, started_ms: int) -> Iterator[Finish]:
        lateness = max(0, started_ms - message.delivery.due_time.ToMilliseconds())
        yield lambda result: self._record(result, lateness)

    def _record(self, result: worker_pb2.RunResult, lateness_ms: int) -> None:
        d = result.delivery
        labels = {"queue": d.queue, "handler": d.handler}
        duration = result.finish_time.ToMilliseconds() - result.start_time.ToMilliseconds()
        outcome = {**labels, "outcome": _OUTCOMES.get(result.kind, "unknown")}
        for sink in self.sinks:
            sink.observe(RUN_START_LATENESS, lateness_ms, labels)
            sink.observe(RUN_DURATION, max(0, duration), labels)
            sink.add(RUNS, 1, outcome)


class RunTelemetry(RunMetrics):
    """Records each run as a span and in the run metrics."""

    def __init__(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        *,
        sinks: Sequence[MetricSink] = (),
    ) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        meters = meter_provider or metrics.get_meter_provider()
        super().__init__([OtelMetrics(meters, "tikk.worker"), *sinks])
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("tikk.worker")

    def _parent(self, message: Message) -> Any:
        carrier = trace_carrier(message.headers, message.delivery.trace_context)
        return self._propagator.extract(carrier=carrier) if carrier else None

    @contextlib.contextmanager
    def run(self, message: Message, started_ms: int) -> Iterator[Finish]:
        d = message.delivery
        due_ms = d.due_time.ToMilliseconds()
        attributes: dict[str, str | int] = {
            "tikk.namespace": d.namespace, "tikk.task_id": d.task_id, "tikk.queue": d.queue,
            "tikk.handler": d.handler, "tikk.attempt": d.attempt,
            "tikk.idempotency_key": d.idempotency_key,
            "tikk.delivery_count": message.delivery_count,
            "tikk.lateness_ms": max(0, started_ms - due_ms),
        }  # fmt: skip
        with self._tracer.start_as_current_span(
            f"run {d.handler}",
            context=self._parent(message),
            kind=self._trace.SpanKind.CONSUMER,
            start_time=started_ms * 1_000_000,
            attributes=attributes,
        ) as span:
            yield lambda result: self._finish(span, result, max(0, started_ms - due_ms))

    def _finish(self, span: Any, result: worker_pb2.RunResult, lateness_ms: int) -> None:
        outcome = _OUTCOMES.get(result.kind, "unknown")
        span.set_attribute("tikk.outcome", outcome)
        if result.kind != worker_pb2.RESULT_KIND_SUCCEEDED:
            description = f"{result.error_type}: {result.error_message}"
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, description))
        self._record(result, lateness_ms)
