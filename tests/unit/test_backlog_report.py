"""The server's report of ready-queue backlogs: a real local queue read by ``report_backlog``
into the real OpenTelemetry SDK, collected by an in-memory reader."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from dispatcher.ready_queue.local import LocalReadyQueue
from server.backlog_report import report_backlog
from tests.factories import T0, make_task
from tests.waiting import eventually_async
from tikk.clock import ManualClock
from tikk.model import Delivery
from tikk.telemetry import OtelTelemetry, Providers


@pytest.fixture
def metrics() -> Iterator[tuple[OtelTelemetry, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    providers = Providers(TracerProvider(), MeterProvider(metric_readers=[reader]))
    yield OtelTelemetry(providers), reader
    providers.shutdown()


def gauge(reader: InMemoryMetricReader, name: str) -> dict[str, Any]:
    """queue -> last value of gauge ``name``; empty before anything was reported."""
    data = reader.get_metrics_data()
    if data is None:
        return {}
    points: list[Any] = [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]
    return {point.attributes["queue"]: point.value for point in points}


async def test_waiting_tasks_and_the_oldest_age_are_reported_per_queue(
    tmp_path: Path, metrics: tuple[OtelTelemetry, InMemoryMetricReader]
) -> None:
    telemetry, reader = metrics
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    await queue.start()
    await queue.prepare(["idle"])
    await queue.publish([Delivery(make_task(f"t{i}", queue="q").entry(), T0 + i) for i in range(3)])
    clock = ManualClock(T0 + 60_000)
    reporting = asyncio.create_task(report_backlog(queue, clock, telemetry, every_s=0.01))
    try:
        await eventually_async(lambda: len(gauge(reader, "tikk.queue.oldest_age_ms")) == 2, 10)
    finally:
        reporting.cancel()
        await queue.close()
    assert gauge(reader, "tikk.queue.waiting") == {"q": 3, "idle": 0}
    assert gauge(reader, "tikk.queue.oldest_age_ms") == {"q": 60_000, "idle": 0}
