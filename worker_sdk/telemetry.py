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
default to the globally configured ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from tikk.queue_contract import trace_carrier
from tikk.v1 import worker_pb2
from worker_sdk.queues.consumer import Message

_LATENESS_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000)
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


class RunTelemetry(NoTelemetry):
    """Records each run as a span and in the run metrics."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("tikk.worker")
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("tikk.worker")
        self._lateness = meter.create_histogram(
            "tikk.run.start_lateness", unit="ms", description="Due time to handler start",
            explicit_bucket_boundaries_advisory=list(_LATENESS_BUCKETS_MS),
        )  # fmt: skip
        self._duration = meter.create_histogram(
            "tikk.run.duration", unit="ms", description="Handler start to finish",
            explicit_bucket_boundaries_advisory=list(_LATENESS_BUCKETS_MS),
        )  # fmt: skip
        self._runs = meter.create_counter("tikk.runs", description="Runs by outcome")

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
        d = result.delivery
        labels = {"queue": d.queue, "handler": d.handler}
        self._lateness.record(lateness_ms, labels)
        duration = result.finish_time.ToMilliseconds() - result.start_time.ToMilliseconds()
        self._duration.record(max(0, duration), labels)
        self._runs.add(1, {**labels, "outcome": outcome})
