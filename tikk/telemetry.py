"""OpenTelemetry for the server and the dispatcher: traces and metrics of the task path.

A trace follows one task: the API call that created it (its span continues the caller's
``traceparent`` from the gRPC metadata), then one ``dispatch <queue>`` span per attempt when
the dispatcher hands it to the queue, then the worker's ``run <handler>`` span around the
handler (``worker_sdk.telemetry``). The context travels in the task row, the due-index row,
the ``Delivery`` message and, on Kafka, the standard ``traceparent`` message header.

Metrics (units in the names' descriptions):

- ``tikk.dispatch.lateness``   histogram, ms from due time to the queue's acknowledgement
- ``tikk.tasks.dispatched``    counter of deliveries handed to the queue
- ``tikk.due.backlog``         gauge per shard: rows due now that the queue has not yet accepted
- ``tikk.dispatch.cursor_lag`` gauge per shard, s between now and the shard's cursor (grows
  when a shard is behind, including rows not read yet)
- ``tikk.dispatch.shards_owned``, ``tikk.dispatch.shard_count``  gauges of each dispatcher:
  the shards it owns and the store's shard count (their sum over dispatchers below the count
  is a shard without an owner)
- ``tikk.dispatch.store_reads``, ``tikk.dispatch.rows_read``  counters of the dispatcher's
  reads of the due index and the rows they returned (follow what is due, not what is stored)
- ``tikk.retries``, ``tikk.dead_letters``  counters per queue, counted by the server
- ``tikk.results.refused``  counter of run results the server refused, by ``reason`` (a bad
  delivery token: ``missing``, ``malformed``, ``unknown_key``, ``mismatch``, or one that ran
  out: ``token_expired``; a task not running that attempt: ``not_dispatched``,
  ``stale_attempt``; or a finished attempt that took its share of further runs:
  ``too_many_runs``). Not by queue: a refused result's queue is whatever the sender wrote.
- ``tikk.results.recorded``, ``tikk.results.start_lateness``  runs the server recorded, by
  queue and status, and their due → start lateness as the workers reported it: what every
  run came to, read in one place (the console's overview draws it)
- ``tikk.results.duplicates``  counter per queue of runs recorded for an attempt that had
  already succeeded (duplicate deliveries: at-least-once)
- ``tikk.auth.refused``  counter of calls (or messages of a stream) the server's
  authentication refused, by ``method`` and ``code`` (``unauthenticated``,
  ``permission_denied``; ``unavailable`` when the credential store did not answer)
- ``tikk.queue.waiting``, ``tikk.queue.oldest_age_ms``  gauges per ready queue, reported by
  the server: tasks handed to the queue and not yet consumed for good, and the age of the
  oldest of them (a queue nobody consumes grows both)
- worker side: ``tikk.run.start_lateness`` (due → handler start), ``tikk.runs``,
  ``tikk.run.duration``

Every metric is described once in ``tikk.metric_catalog`` and recorded into the sinks of
``tikk.metric_sinks`` (OpenTelemetry, Prometheus). Off is the plain ``Telemetry`` object with
no sink: every method returns at once and OpenTelemetry is not imported, so a process that
neither traces nor meters pays nothing for it. ``open_telemetry`` builds one from a spec:
``off``, ``console`` (JSON lines on stdout), ``console:PATH`` (appended to a file), ``otlp``
(OTLP/gRPC to the endpoint in ``OTEL_EXPORTER_OTLP_ENDPOINT``, default ``localhost:4317``) or
``otlp:http://host:port``.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

from tikk import metric_catalog as m
from tikk.errors import InvalidArgument
from tikk.metric_catalog import MetricSink, Series
from tikk.metric_sinks import OtelMetrics
from tikk.model import Delivery, DueEntry
from tikk.queue_contract import TRACE_KEYS
from tikk.schedules.model import OccurrenceRecord

_EXPORT_INTERVAL_MS = 10_000


@dataclass(frozen=True)
class ShardGauge:
    """What the dispatcher reports about one owned shard."""

    backlog: int
    cursor_lag_s: int


@dataclass(frozen=True)
class QueueGauge:
    """What the server reports about one ready queue."""

    waiting: int
    oldest_age_ms: int


class Telemetry:
    """Telemetry without tracing, recording metrics into ``sinks`` (none: off, and every
    method returns at once); ``OtelTelemetry`` adds traces."""

    tracing = False
    sinks: tuple[MetricSink, ...] = ()
    # The SDK providers behind it, for parts wired separately (an in-process worker).
    providers: Providers | None = None

    def __init__(self, sinks: Sequence[MetricSink] = ()) -> None:
        self.sinks = tuple(sinks)

    @property
    def metering(self) -> bool:
        """Whether metrics go anywhere (gauges worth computing)."""
        return bool(self.sinks)

    def with_sink(self, sink: MetricSink) -> Telemetry:
        """This telemetry, recording into ``sink`` too."""
        self.sinks = (*self.sinks, sink)
        return self

    def _add(self, metric: m.Metric, amount: float = 1, **labels: str) -> None:
        for sink in self.sinks:
            sink.add(metric, amount, labels)

    @contextlib.contextmanager
    def call_span(self, name: str, metadata: Iterable[tuple[str, Any]]) -> Iterator[None]:
        """A server span for an RPC that continues the caller's trace (in ``metadata``),
        current while the block runs."""
        yield

    def current_trace(self) -> dict[str, str]:
        """The trace context of the current span, to store on the tasks a call creates
        (empty when off)."""
        return {}

    @contextlib.contextmanager
    def dispatching(self, deliveries: Sequence[Delivery]) -> Iterator[Sequence[Delivery]]:
        """Observe ``deliveries`` going to the queue: with tracing, each in its own dispatch
        span that ends when the block does (as an error if it raised); counted with its
        lateness if the block did not raise. Yields what to publish: ``deliveries``
        themselves, or with tracing each carrying its dispatch span's trace context (which
        the worker's run span continues)."""
        yield deliveries
        self._dispatched(deliveries)

    def _dispatched(self, deliveries: Sequence[Delivery]) -> None:
        for sink in self.sinks:
            for d in deliveries:
                labels = {"queue": d.entry.queue}
                sink.observe(m.DISPATCH_LATENESS, max(0, d.fired_ms - d.entry.due_ms), labels)
                sink.add(m.DISPATCHED, 1, labels)

    def report_shards(self, shards: Mapping[int, ShardGauge], shard_count: int = 0) -> None:
        """The latest per-shard figures of a dispatcher (and the store's shard count)."""
        backlog: dict[Series, float] = {(str(s),): g.backlog for s, g in shards.items()}
        lag: dict[Series, float] = {(str(s),): g.cursor_lag_s for s, g in shards.items()}
        for sink in self.sinks:
            sink.set_gauge(m.DUE_BACKLOG, backlog)
            sink.set_gauge(m.CURSOR_LAG, lag)
            sink.set_gauge(m.SHARDS_OWNED, {(): len(shards)})
            if shard_count:
                sink.set_gauge(m.SHARD_COUNT, {(): shard_count})

    def report_queues(self, queues: Mapping[str, QueueGauge]) -> None:
        """The latest figures of each ready queue."""
        waiting: dict[Series, float] = {(q,): g.waiting for q, g in queues.items()}
        ages: dict[Series, float] = {(q,): g.oldest_age_ms for q, g in queues.items()}
        for sink in self.sinks:
            sink.set_gauge(m.QUEUE_WAITING, waiting)
            sink.set_gauge(m.QUEUE_OLDEST_AGE, ages)

    def retried(self, queue: str) -> None:
        """One failed attempt was scheduled again."""
        self._add(m.RETRIES, queue=queue)

    def store_read(self, rows: int) -> None:
        """The dispatcher read the due index once, and got ``rows`` rows."""
        self._add(m.STORE_READS)
        if rows:
            self._add(m.ROWS_READ, rows)

    def resent(self, count: int) -> None:
        """``count`` deliveries went out for tasks already DISPATCHED: possible duplicates
        (a new shard owner re-sending what was in flight, or a publish repeated)."""
        if count:
            self._add(m.RESENT, count)

    def late_write(self, reason: str) -> None:
        """A due row was placed later than asked so no cursor passes it unread: ``skew``
        (a cursor ahead of this server's clock) or ``slow`` (the write took too long)."""
        self._add(m.LATE_WRITES, reason=reason)

    def run_recorded(self, queue: str, status: str, start_lateness_ms: int) -> None:
        """The server recorded a run (``succeeded``, ``failed``, ``dead_lettered``) that
        started ``start_lateness_ms`` after its due time, as its worker reported."""
        self._add(m.RESULTS_RECORDED, queue=queue, status=status)
        for sink in self.sinks:
            sink.observe(m.RESULT_START_LATENESS, max(0, start_lateness_ms), {"queue": queue})

    def dead_lettered(self, queue: str) -> None:
        """One task was given up."""
        self._add(m.DEAD_LETTERS, queue=queue)

    def result_refused(self, reason: str) -> None:
        """The server refused one run result (see ``tikk.results.refused``)."""
        self._add(m.RESULTS_REFUSED, reason=reason)

    def duplicate_run(self, queue: str) -> None:
        """The server recorded another run of an attempt that had already succeeded (see
        ``tikk.results.duplicates``)."""
        self._add(m.DUPLICATE_RUNS, queue=queue)

    def auth_refused(self, method: str, code: str) -> None:
        """The server refused a call of ``method``, or a message of its stream, with the
        status ``code`` (see ``tikk.auth.refused``)."""
        self._add(m.AUTH_REFUSED, method=method, code=code)

    def occurrences(self, records: Sequence[OccurrenceRecord]) -> None:
        """Schedule occurrences were decided (fired, missed, skipped...)."""
        for outcome, n in Counter(r.outcome for r in records).items():
            self._add(m.OCCURRENCES, n, outcome=outcome.name.lower())

    def shutdown(self) -> None:
        """Flush what is buffered and stop exporting."""


@dataclass(frozen=True)
class Providers:
    """The SDK's tracer and meter providers of one process."""

    tracer_provider: Any
    meter_provider: Any
    # The file the console exporters write to, if any: closed once they have flushed.
    out: IO[str] | None = None

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        if self.out is not None:
            self.out.close()


def build_providers(spec: str, service_name: str) -> Providers | None:
    """SDK providers exporting as ``spec`` says; ``None`` for ``off``. Raises
    ``InvalidArgument`` (field ``otel``) for a spec it does not know."""
    kind, _, target = spec.partition(":")
    if kind in ("", "off"):
        return None
    if kind not in ("console", "otlp"):
        raise InvalidArgument("otel", f"unknown exporter {spec!r} (use off, console[:PATH], otlp)")
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("telemetry needs the otel extra: pip install 'tikk[otel]'") from exc
    out: IO[str] | None = None
    if kind == "console":
        out = open(target, "a", encoding="utf-8", buffering=1) if target else None  # noqa: SIM115
        span_exporter, metric_exporter = _console_exporters(out or sys.stdout)
    else:
        span_exporter, metric_exporter = _otlp_exporters(target)
    resource = Resource.create({"service.name": service_name})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    reader = PeriodicExportingMetricReader(
        metric_exporter, export_interval_millis=_EXPORT_INTERVAL_MS
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    return Providers(tracer_provider, meter_provider, out)


def _console_exporters(out: IO[str]) -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    # One JSON document per line, so a file of them can be read back line by line. A file
    # stays open until the providers shut down, as stdout would.
    spans = ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n")
    metrics = ConsoleMetricExporter(out=out, formatter=lambda m: m.to_json(indent=None) + "\n")
    return spans, metrics


def _otlp_exporters(endpoint: str) -> tuple[Any, Any]:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("otlp export needs the otel extra: pip install 'tikk[otel]'") from exc
    options: dict[str, Any] = {}
    if endpoint:
        options = {"endpoint": endpoint, "insecure": endpoint.startswith("http://")}
    return OTLPSpanExporter(**options), OTLPMetricExporter(**options)


def open_telemetry(spec: str, service_name: str) -> Telemetry:
    """The process's telemetry for ``spec`` (see the module docstring)."""
    providers = build_providers(spec, service_name)
    return Telemetry() if providers is None else OtelTelemetry(providers)


class OtelTelemetry(Telemetry):
    """``Telemetry`` tracing, and recording metrics, through OpenTelemetry providers (the
    SDK's, or any others); more sinks may be added (``with_sink``)."""

    tracing = True

    def __init__(self, providers: Providers, *, owns_providers: bool = True) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        super().__init__([OtelMetrics(providers.meter_provider)])
        self.providers = providers
        self._owned = providers if owns_providers else None
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = providers.tracer_provider.get_tracer("tikk")

    def _context_of(self, carrier: Mapping[str, str]) -> Any:
        return self._propagator.extract(carrier=dict(carrier)) if carrier else None

    def _carrier_of(self, span: Any) -> dict[str, str]:
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        return carrier

    @contextlib.contextmanager
    def call_span(self, name: str, metadata: Iterable[tuple[str, Any]]) -> Iterator[None]:
        incoming = {k: str(v) for k, v in metadata if k in TRACE_KEYS}
        kind = self._trace.SpanKind.SERVER
        with self._tracer.start_as_current_span(
            name, context=self._context_of(incoming), kind=kind
        ):
            yield

    def current_trace(self) -> dict[str, str]:
        return self._carrier_of(self._trace.get_current_span())

    @contextlib.contextmanager
    def dispatching(self, deliveries: Sequence[Delivery]) -> Iterator[Sequence[Delivery]]:
        spans = [self._dispatch_span(d.entry, d.fired_ms) for d in deliveries]
        traced = [
            replace(d, trace_context=self._carrier_of(span))
            for d, span in zip(deliveries, spans, strict=True)
        ]
        try:
            yield traced
        except BaseException as exc:
            for span in spans:
                span.record_exception(exc)
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(exc)))
                span.end()
            raise
        for span in spans:
            span.end()
        self._dispatched(deliveries)

    def _dispatch_span(self, e: DueEntry, now_ms: int) -> Any:
        return self._tracer.start_span(
            f"dispatch {e.queue}",
            context=self._context_of(e.trace_context),
            kind=self._trace.SpanKind.PRODUCER,
            start_time=now_ms * 1_000_000,
            attributes={
                "tikk.namespace": e.namespace, "tikk.task_id": e.task_id,
                "tikk.queue": e.queue, "tikk.attempt": e.attempt,
                "tikk.idempotency_key": e.idempotency_key,
                "tikk.lateness_ms": max(0, now_ms - e.due_ms),
            },
        )  # fmt: skip

    def shutdown(self) -> None:
        if self._owned is not None:
            self._owned.shutdown()
