"""The two places metrics go: OpenTelemetry (exported as ``--otel`` says) and Prometheus
(scraped from ``/metrics``). Both build their instruments from ``tikk.metric_catalog``.

Prometheus and ``--processes N``: each server process records into files of its own in a
directory the supervisor shares (``PROMETHEUS_MULTIPROC_DIR``, prometheus_client's
multiprocess mode), and the one process serving ``/metrics`` adds them up. A process that
died leaves its counts behind, so a counter never goes backwards when a member is restarted;
a gauge shows the value set last by any process (``mostrecent``), as each reports the same
cluster-wide figure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tikk.metric_catalog import ALL, Metric, MetricSink, Series

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


class OtelMetrics(MetricSink):
    """Instruments of an OpenTelemetry meter provider; gauges are observed at export."""

    def __init__(self, meter_provider: Any, scope: str = "tikk") -> None:
        from opentelemetry.metrics import Observation

        self._observation = Observation
        meter = meter_provider.get_meter(scope)
        self._instruments: dict[str, Any] = {}
        self._gauges: dict[str, Mapping[Series, float]] = {}
        for m in ALL:
            self._instruments[m.name] = self._instrument(meter, m)

    def _instrument(self, meter: Any, m: Metric) -> Any:
        if m.kind == "counter":
            return meter.create_counter(m.name, unit=m.unit, description=m.description)
        if m.kind == "histogram":
            return meter.create_histogram(
                m.name, unit=m.unit, description=m.description,
                explicit_bucket_boundaries_advisory=list(m.buckets),
            )  # fmt: skip
        return meter.create_observable_gauge(
            m.name, callbacks=[self._observer(m)], unit=m.unit, description=m.description
        )

    def _observer(self, m: Metric) -> Any:
        def callback(_options: Any) -> list[Any]:
            # Runs on the exporter's thread; the mapping is replaced whole, never mutated.
            values = self._gauges.get(m.name, {})
            return [self._observation(v, dict(zip(m.labels, s, strict=True)))
                    for s, v in values.items()]  # fmt: skip

        return callback

    def add(self, metric: Metric, amount: float, labels: Mapping[str, str]) -> None:
        self._instruments[metric.name].add(amount, dict(labels))

    def observe(self, metric: Metric, value: float, labels: Mapping[str, str]) -> None:
        self._instruments[metric.name].record(value, dict(labels))

    def set_gauge(self, metric: Metric, values: Mapping[Series, float]) -> None:
        self._gauges[metric.name] = dict(values)


class PrometheusMetrics(MetricSink):
    """Metrics of prometheus_client in a registry of their own (see the module)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, disable_created_metrics

        # No ``_created`` series beside every counter and histogram: a scrape stays half as
        # long, and nothing of ours reads them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self._metrics = {m.name: self._build(m) for m in ALL}

    def _build(self, m: Metric) -> Any:
        from prometheus_client import Counter, Gauge, Histogram

        name, doc, labels = m.prometheus_name, m.description, m.labels
        if m.kind == "counter":
            return Counter(name, doc, labels, registry=self.registry)
        if m.kind == "histogram":
            return Histogram(name, doc, labels, registry=self.registry, buckets=m.buckets)
        return Gauge(name, doc, labels, registry=self.registry, multiprocess_mode="mostrecent")

    def _child(self, metric: Metric, labels: Mapping[str, str]) -> Any:
        instrument = self._metrics[metric.name]
        return instrument.labels(**labels) if metric.labels else instrument

    def add(self, metric: Metric, amount: float, labels: Mapping[str, str]) -> None:
        self._child(metric, labels).inc(amount)

    def observe(self, metric: Metric, value: float, labels: Mapping[str, str]) -> None:
        self._child(metric, labels).observe(value)

    def set_gauge(self, metric: Metric, values: Mapping[Series, float]) -> None:
        gauge = self._metrics[metric.name]
        if not metric.labels:
            for value in values.values():
                gauge.set(value)
            return
        gauge.clear()
        for series, value in values.items():
            gauge.labels(*series).set(value)

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample a scrape would show now: (name, sorted labels) → value."""
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in self._registry_now().collect()
            for sample in family.samples
        }

    def _registry_now(self) -> Any:
        """This process's registry, or with ``PROMETHEUS_MULTIPROC_DIR`` one reading every
        process's files."""
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        if not os.environ.get(MULTIPROCESS_ENV):
            return self.registry
        merged = CollectorRegistry()
        MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        return merged

    def exposition(self) -> tuple[bytes, str]:
        """The text a scrape gets, and its content type: this process's metrics, or with
        ``PROMETHEUS_MULTIPROC_DIR`` set, those of every process that shares the directory."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self._registry_now()), CONTENT_TYPE_LATEST


def forget_process(pid: int) -> None:
    """A process of a multiprocess group ended: drop its live gauges (its counts stay)."""
    if os.environ.get(MULTIPROCESS_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
