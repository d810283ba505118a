"""Telemetry of the task path, recorded by the real OpenTelemetry SDK into in-memory readers
(and, for OTLP, sent to a real gRPC endpoint on loopback)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from tests.factories import T0, make_task
from tikk.clock import ManualClock
from tikk.errors import InvalidArgument
from tikk.model import Delivery
from tikk.schedules.model import OccurrenceRecord, Outcome
from tikk.settings import DispatchSettings
from tikk.store.sqlite.tasks import SqliteTaskStore
from tikk.store.tasks import advance_cursor
from tikk.telemetry import OtelTelemetry, Providers, Telemetry, build_providers, open_telemetry
from tikk.timestamps import to_timestamp
from tikk.v1 import worker_pb2
from worker_sdk.context import TaskContext
from worker_sdk.middleware import RunCall
from worker_sdk.queues.consumer import Message
from worker_sdk.telemetry import RunTelemetry

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN}-01"


@dataclass
class Recorded:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    providers: Providers

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        if data is None:  # nothing recorded at all
            return []
        return [
            point
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def recorded() -> Iterator[Recorded]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    providers = Providers(tracer_provider, MeterProvider(metric_readers=[reader]))
    yield Recorded(spans, reader, providers)
    providers.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def trace_hex(span: ReadableSpan) -> tuple[str, str, str]:
    """(trace id, span id, parent span id) as hex strings."""
    assert span.context is not None
    parent = f"{span.parent.span_id:016x}" if span.parent is not None else ""
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}", parent


def test_off_is_the_no_op_and_builds_nothing() -> None:
    assert type(open_telemetry("off", "x")) is Telemetry
    assert build_providers("", "x") is None
    built = [Delivery(make_task("a").entry(), T0 + 5)]
    with Telemetry().dispatching(built) as deliveries:
        assert deliveries is built  # what the dispatcher built goes out untouched
    with Telemetry().call_span("x", [("traceparent", TRACEPARENT)]):
        assert Telemetry().current_trace() == {}


def test_an_unknown_exporter_is_refused_by_name() -> None:
    with pytest.raises(InvalidArgument) as err:
        build_providers("zipkin", "x")
    assert err.value.field == "otel" and "zipkin" in err.value.reason


def test_a_process_without_telemetry_never_imports_opentelemetry() -> None:
    code = (
        "import sys, asyncio\n"
        "import server.runtime, server.api.tasks, dispatcher.scanner, worker_sdk\n"
        "from tikk.telemetry import open_telemetry\n"
        "t = open_telemetry('off', 'x')\n"
        "with t.dispatching([]): pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_call_span_continues_the_callers_trace(recorded: Recorded) -> None:
    telemetry = OtelTelemetry(recorded.providers, owns_providers=False)
    metadata = [("traceparent", TRACEPARENT), ("user-agent", "grpc")]
    with telemetry.call_span("tikk.v1.TaskService/CreateTask", metadata):
        trace = telemetry.current_trace()
    assert telemetry.current_trace() == {}  # outside the span, nothing to carry
    (span,) = recorded.finished()
    trace_id, span_id, parent = trace_hex(span)
    assert (trace_id, parent, span.kind) == (TRACE_ID, CALLER_SPAN, SpanKind.SERVER)
    # What is stored on the task points at this span.
    assert trace["traceparent"] == f"00-{TRACE_ID}-{span_id}-01"


def test_dispatch_spans_are_children_of_the_task_and_counted(recorded: Recorded) -> None:
    telemetry = OtelTelemetry(recorded.providers, owns_providers=False)
    entry = make_task("a", due_ms=T0).evolve(trace_context={"traceparent": TRACEPARENT}).entry()
    untraced = make_task("b", due_ms=T0 + 100).entry()
    built = [Delivery(entry, T0 + 140), Delivery(untraced, T0 + 140)]
    with telemetry.dispatching(built) as deliveries:
        pass
    spans = sorted(recorded.finished(), key=lambda s: str(attrs(s)["tikk.task_id"]))
    assert [s.name for s in spans] == ["dispatch q", "dispatch q"]
    a_trace, a_span, a_parent = trace_hex(spans[0])
    assert (a_trace, a_parent) == (TRACE_ID, CALLER_SPAN)
    assert attrs(spans[0])["tikk.lateness_ms"] == 140
    assert deliveries[0].trace_context["traceparent"] == f"00-{TRACE_ID}-{a_span}-01"
    # A task created without a trace starts one of its own.
    b_trace, _, b_parent = trace_hex(spans[1])
    assert b_trace != TRACE_ID and b_parent == ""
    (histogram,) = recorded.points("tikk.dispatch.lateness")
    assert (histogram.count, histogram.sum, histogram.max) == (2, 180, 140)
    (counter,) = recorded.points("tikk.tasks.dispatched")
    assert counter.value == 2


def test_a_failed_publish_marks_its_spans_and_counts_nothing(recorded: Recorded) -> None:
    telemetry = OtelTelemetry(recorded.providers, owns_providers=False)
    built = [Delivery(make_task().entry(), T0)]
    with pytest.raises(ConnectionError), telemetry.dispatching(built):
        raise ConnectionError("queue down")
    (span,) = recorded.finished()
    assert span.status.status_code is StatusCode.ERROR
    assert recorded.points("tikk.tasks.dispatched") == []


async def test_the_dispatcher_reports_backlog_and_cursor_lag_per_shard(
    recorded: Recorded, tmp_path: Path
) -> None:
    telemetry = OtelTelemetry(recorded.providers, owns_providers=False)
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), 4)
    await store.start()
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    clock = ManualClock(T0)
    settings = DispatchSettings(cursor_flush_interval_ms=0)
    try:
        await queue.start()
        for shard in range(4):
            await advance_cursor(store, shard, (T0 // 1000) - 1, 1)
        task = make_task("a", due_ms=T0 + 500, shard_count=4)
        await store.create(task)
        dispatcher = Dispatcher(
            store, queue, SingleOwner(4, 1), clock, settings=settings, telemetry=telemetry
        )
        clock.advance(20_000)
        await dispatcher.tick(clock.now_ms())
    finally:
        await queue.close()
        await store.close()
    lag = {p.attributes["shard"]: p.value for p in recorded.points("tikk.dispatch.cursor_lag")}
    # Once everything is sent, the cursor trails now by the late-write grace (5 s) and the
    # second that has to end before its grace starts.
    assert lag == dict.fromkeys("0123", settings.late_write_grace_s + 1)
    backlog = {p.attributes["shard"]: p.value for p in recorded.points("tikk.due.backlog")}
    assert backlog == dict.fromkeys("0123", 0)
    assert [p.value for p in recorded.points("tikk.dispatch.shards_owned")] == [4]
    assert [p.value for p in recorded.points("tikk.dispatch.shard_count")] == [4]
    (lateness,) = recorded.points("tikk.dispatch.lateness")
    assert (lateness.count, lateness.sum) == (1, 19_500)


def message(headers: dict[str, str], inside: dict[str, str]) -> Message:
    delivery = worker_pb2.Delivery(
        namespace="n", task_id="a", queue="q", handler="h", attempt=2,
        due_time=to_timestamp(T0), idempotency_key="n/a@1", trace_context=inside,
    )  # fmt: skip
    return Message(delivery, 1, None, b"", headers)


async def run_through(telemetry: RunTelemetry, msg: Message, started: int, error: Any) -> None:
    """One run of ``msg`` through the telemetry link of the chain: it starts at ``started``
    and raises ``error`` (or succeeds, if None) 50 ms later by the link's clock."""
    d = msg.delivery
    ctx = TaskContext(
        namespace=d.namespace, task_id=d.task_id, queue=d.queue, handler=d.handler,
        run_id="r", attempt=d.attempt, max_attempts=3, scheduled_time=_AT, due_time=_AT,
        fired_time=_AT, idempotency_key=d.idempotency_key, labels={}, worker_id="w",
        delivery_count=msg.delivery_count,
    )  # fmt: skip

    async def handler(call: RunCall) -> bytes:
        telemetry_clock.advance(50)
        if error is not None:
            raise error
        return b""

    call = RunCall(ctx, d.payload, msg.headers, d, started)
    with contextlib.suppress(Exception):
        await telemetry(call, handler)


_AT = datetime.fromtimestamp(T0 / 1000, tz=UTC)
telemetry_clock = ManualClock(T0)


async def test_the_run_span_continues_the_header_trace_and_records_lateness(
    recorded: Recorded,
) -> None:
    p = recorded.providers
    telemetry = RunTelemetry(p.tracer_provider, p.meter_provider, clock=telemetry_clock)
    dispatch_span = "1111111111111111"
    headers = {"traceparent": f"00-{TRACE_ID}-{dispatch_span}-01"}
    inside = {"traceparent": f"00-{'9' * 32}-{'2' * 16}-01"}
    telemetry_clock.set(T0 + 30)
    await run_through(telemetry, message(headers, inside), T0 + 30, ValueError("bad"))
    (span,) = recorded.finished()
    trace_id, _, parent = trace_hex(span)
    # Kafka's header wins over the copy inside the message.
    assert (span.name, trace_id, parent) == ("run h", TRACE_ID, dispatch_span)
    assert span.kind is SpanKind.CONSUMER and span.status.status_code is StatusCode.ERROR
    assert attrs(span)["tikk.outcome"] == "failed"
    (lateness,) = recorded.points("tikk.run.start_lateness")
    assert (lateness.count, lateness.sum) == (1, 30)
    (duration,) = recorded.points("tikk.run.duration")
    assert duration.sum == 50
    (runs,) = recorded.points("tikk.runs")
    assert (runs.value, runs.attributes["outcome"]) == (1, "failed")


async def test_without_headers_the_run_span_uses_the_context_in_the_delivery(
    recorded: Recorded,
) -> None:
    p = recorded.providers
    telemetry = RunTelemetry(p.tracer_provider, p.meter_provider, clock=telemetry_clock)
    inside = {"traceparent": f"00-{TRACE_ID}-{'2' * 16}-01"}
    await run_through(telemetry, message({}, inside), T0, None)
    (span,) = recorded.finished()
    assert trace_hex(span)[::2] == (TRACE_ID, "2" * 16)
    assert span.status.status_code is StatusCode.UNSET


def test_console_export_writes_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "otel.jsonl"
    telemetry = open_telemetry(f"console:{path}", "tikk-test")
    with telemetry.call_span("op", [("traceparent", TRACEPARENT)]):
        pass
    telemetry.retried("q")
    telemetry.shutdown()
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    spans = [d for d in docs if "name" in d]
    assert [(s["name"], s["context"]["trace_id"]) for s in spans] == [("op", "0x" + TRACE_ID)]
    assert spans[0]["resource"]["attributes"]["service.name"] == "tikk-test"
    metric_names = {
        m["name"]
        for d in docs
        if "resource_metrics" in d
        for rm in d["resource_metrics"]
        for sm in rm["scope_metrics"]
        for m in sm["metrics"]
    }
    assert "tikk.retries" in metric_names


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


def test_otlp_export_reaches_a_grpc_collector() -> None:
    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        telemetry = open_telemetry(f"otlp:http://127.0.0.1:{port}", "tikk-test")
        entry = make_task("a").evolve(trace_context={"traceparent": TRACEPARENT}).entry()
        with telemetry.dispatching([Delivery(entry, T0)]):
            pass
        started = time.monotonic()
        telemetry.shutdown()  # flushes the batch
        assert time.monotonic() - started < 30
    finally:
        server.stop(0)
    spans = [
        span
        for request in collector.requests
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    assert [(s.name, s.trace_id.hex(), s.parent_span_id.hex()) for s in spans] == [
        ("dispatch q", TRACE_ID, CALLER_SPAN)
    ]


def test_schedule_occurrences_are_counted_by_outcome(recorded: Recorded) -> None:
    telemetry = OtelTelemetry(recorded.providers, owns_providers=False)
    records = [
        OccurrenceRecord("default", "s", T0 + k, T0 + k, outcome, T0 + 90_000)
        for k, outcome in enumerate([Outcome.MISSED, Outcome.MISSED, Outcome.FIRED])
    ]
    telemetry.occurrences(records)
    counts = {
        p.attributes["outcome"]: p.value for p in recorded.points("tikk.schedule.occurrences")
    }
    assert counts == {"missed": 2, "fired": 1}
