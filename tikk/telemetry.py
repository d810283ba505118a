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
- ``tikk.dispatch.store_reads``, ``tikk.dispatch.rows_read``  counters of the dispatcher's
  reads of the due index and the rows they returned (follow what is due, not what is stored)
- ``tikk.retries``, ``tikk.dead_letters``  counters per queue, counted by the server
- ``tikk.results.refused``  counter of run results the server refused, by ``reason`` (a bad
  delivery token: ``missing``, ``malformed``, ``unknown_key``, ``mismatch``, or one that ran
  out: ``token_expired``; a task not running that attempt: ``not_dispatched``,
  ``stale_attempt``; or a finished attempt that took its share of further runs:
  ``too_many_runs``). Not by queue: a refused result's queue is whatever the sender wrote.
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

Off is the plain ``Telemetry`` object: every method returns at once and OpenTelemetry is not
imported, so a process that does not trace pays nothing for it. ``open_telemetry`` builds the
real one from a spec: ``off``, ``console`` (JSON lines on stdout), ``console:PATH`` (appended
to a file), ``otlp`` (OTLP/gRPC to the endpoint in ``OTEL_EXPORTER_OTLP_ENDPOINT``, default
``localhost:4317``) or ``otlp:http://host:port``.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Any

from tikk.errors import InvalidArgument
from tikk.model import Delivery, DueEntry
from tikk.queue_contract import TRACE_KEYS
from tikk.schedules.model import OccurrenceRecord

# Histogram buckets in ms, from "on time" to "a minute late".
LATENESS_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000)
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
    """Telemetry switched off; ``OtelTelemetry`` is the same interface, recording."""

    enabled = False
    # The SDK providers behind it, for parts wired separately (an in-process worker).
    providers: Providers | None = None

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
        """Observe ``deliveries`` going to the queue: each in its own dispatch span that ends
        when the block does (as an error if it raised), counted with its lateness if it did
        not. Yields what to publish: ``deliveries`` themselves when off, else each carrying
        its dispatch span's trace context (which the worker's run span continues)."""
        yield deliveries

    def report_shards(self, shards: Mapping[int, ShardGauge]) -> None:
        """The latest per-shard figures; the gauges export the last report."""

    def report_queues(self, queues: Mapping[str, QueueGauge]) -> None:
        """The latest figures of each ready queue; the gauges export the last report."""

    def retried(self, queue: str) -> None:
        """One failed attempt was scheduled again."""

    def store_read(self, rows: int) -> None:
        """The dispatcher read the due index once, and got ``rows`` rows."""

    def resent(self, count: int) -> None:
        """``count`` deliveries went out for tasks already DISPATCHED: possible duplicates
        (a new shard owner re-sending what was in flight, or a publish repeated)."""

    def late_write(self, reason: str) -> None:
        """A due row was placed later than asked so no cursor passes it unread: ``skew``
        (a cursor ahead of this server's clock) or ``slow`` (the write took too long)."""

    def dead_lettered(self, queue: str) -> None:
        """One task was given up."""

    def result_refused(self, reason: str) -> None:
        """The server refused one run result (see ``tikk.results.refused``)."""

    def duplicate_run(self, queue: str) -> None:
        """The server recorded another run of an attempt that had already succeeded (see
        ``tikk.results.duplicates``)."""

    def auth_refused(self, method: str, code: str) -> None:
        """The server refused a call of ``method``, or a message of its stream, with the
        status ``code`` (see ``tikk.auth.refused``)."""

    def occurrences(self, records: Sequence[OccurrenceRecord]) -> None:
        """Schedule occurrences were decided (fired, missed, skipped...)."""

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
    """``Telemetry`` recording through OpenTelemetry providers (the SDK's, or any others)."""

    enabled = True

    def __init__(self, providers: Providers, *, owns_providers: bool = True) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.providers = providers
        self._owned = providers if owns_providers else None
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = providers.tracer_provider.get_tracer("tikk")
        meter = providers.meter_provider.get_meter("tikk")
        self._shards: Mapping[int, ShardGauge] = {}
        self._queues: Mapping[str, QueueGauge] = {}
        self._add_counters(meter)
        self._add_gauges(meter)

    def _add_counters(self, meter: Any) -> None:
        self._lateness = meter.create_histogram(
            "tikk.dispatch.lateness", unit="ms",
            description="Due time to the ready queue's acknowledgement",
            explicit_bucket_boundaries_advisory=list(LATENESS_BUCKETS_MS),
        )  # fmt: skip
        self._dispatched = meter.create_counter(
            "tikk.tasks.dispatched", description="Deliveries handed to the ready queue"
        )
        self._retries = meter.create_counter("tikk.retries", description="Attempts retried")
        self._store_reads = meter.create_counter(
            "tikk.dispatch.store_reads", description="Reads of the due index by the dispatcher"
        )
        self._rows_read = meter.create_counter(
            "tikk.dispatch.rows_read", description="Rows the dispatcher's due-index reads returned"
        )
        self._resent = meter.create_counter(
            "tikk.dispatch.resent", description="Deliveries of tasks already DISPATCHED"
        )
        self._late_writes = meter.create_counter(
            "tikk.late_writes", description="Due rows re-placed ahead of a cursor, by reason"
        )
        self._dead = meter.create_counter("tikk.dead_letters", description="Tasks given up")
        self._refused = meter.create_counter(
            "tikk.results.refused", description="Run results refused by the server, by reason"
        )
        self._duplicates = meter.create_counter(
            "tikk.results.duplicates", description="Further runs of a succeeded attempt recorded"
        )
        self._auth_refused = meter.create_counter(
            "tikk.auth.refused", description="Calls and stream messages refused by auth, by code"
        )
        self._occurrences = meter.create_counter(
            "tikk.schedule.occurrences",
            description="Schedule occurrences decided, by outcome",
        )

    def _add_gauges(self, meter: Any) -> None:
        meter.create_observable_gauge(
            "tikk.due.backlog", callbacks=[self._observe(lambda g: g.backlog)],
            description="Rows due now that the queue has not yet accepted, per shard",
        )  # fmt: skip
        meter.create_observable_gauge(
            "tikk.dispatch.cursor_lag", unit="s",
            callbacks=[self._observe(lambda g: g.cursor_lag_s)],
            description="Seconds between now and the shard's dispatch cursor",
        )  # fmt: skip
        meter.create_observable_gauge(
            "tikk.queue.waiting", callbacks=[self._observe_queues(lambda g: g.waiting)],
            description="Tasks in the ready queue not yet consumed for good, per queue",
        )  # fmt: skip
        meter.create_observable_gauge(
            "tikk.queue.oldest_age_ms", unit="ms",
            callbacks=[self._observe_queues(lambda g: g.oldest_age_ms)],
            description="Age of the oldest task waiting in the ready queue, per queue",
        )  # fmt: skip

    def _observe(self, value: Callable[[ShardGauge], int]) -> Callable[[Any], list[Any]]:
        from opentelemetry.metrics import Observation

        def callback(_options: Any) -> list[Any]:
            # Runs on the exporter's thread; the mapping is replaced whole, never mutated.
            shards = self._shards
            return [Observation(value(g), {"shard": s}) for s, g in shards.items()]

        return callback

    def _observe_queues(self, value: Callable[[QueueGauge], int]) -> Callable[[Any], list[Any]]:
        from opentelemetry.metrics import Observation

        def callback(_options: Any) -> list[Any]:
            queues = self._queues  # replaced whole, never mutated (read on another thread)
            return [Observation(value(g), {"queue": q}) for q, g in queues.items()]

        return callback

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
        for d in deliveries:
            attributes = {"queue": d.entry.queue}
            self._lateness.record(max(0, d.fired_ms - d.entry.due_ms), attributes)
            self._dispatched.add(1, attributes)

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

    def report_shards(self, shards: Mapping[int, ShardGauge]) -> None:
        self._shards = dict(shards)

    def report_queues(self, queues: Mapping[str, QueueGauge]) -> None:
        self._queues = dict(queues)

    def retried(self, queue: str) -> None:
        self._retries.add(1, {"queue": queue})

    def store_read(self, rows: int) -> None:
        self._store_reads.add(1)
        if rows:
            self._rows_read.add(rows)

    def resent(self, count: int) -> None:
        if count:
            self._resent.add(count)

    def late_write(self, reason: str) -> None:
        self._late_writes.add(1, {"reason": reason})

    def dead_lettered(self, queue: str) -> None:
        self._dead.add(1, {"queue": queue})

    def result_refused(self, reason: str) -> None:
        self._refused.add(1, {"reason": reason})

    def duplicate_run(self, queue: str) -> None:
        self._duplicates.add(1, {"queue": queue})

    def auth_refused(self, method: str, code: str) -> None:
        self._auth_refused.add(1, {"method": method, "code": code})

    def occurrences(self, records: Sequence[OccurrenceRecord]) -> None:
        for outcome, n in Counter(r.outcome for r in records).items():
            self._occurrences.add(n, {"outcome": outcome.name.lower()})

    def shutdown(self) -> None:
        if self._owned is not None:
            self._owned.shutdown()
