"""Every metric tikk records, described once (stdlib only: the worker SDK reads it too).

Each sink (``tikk.metric_sinks``: OpenTelemetry, Prometheus) builds its instruments from this
list, so a metric has one name, kind, unit, label set and bucket layout wherever it is read:
in OTLP as ``tikk.dispatch.lateness``, in Prometheus as ``tikk_dispatch_lateness_ms``. The
dashboard and the alert rules under ``deploy/`` name only metrics listed here (a test checks).

Who records what: the server (results, auth, late writes, queue backlogs), the dispatcher
(dispatch, shards, schedule occurrences) and the worker (runs). Under ``--processes N`` every
server process records its own events and one exposition adds them up
(``tikk.metric_sinks.PrometheusMetrics``), so nothing is counted N times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

# Histogram buckets in ms, from "on time" to "a minute late".
LATENESS_BUCKETS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 60_000)

Kind = Literal["counter", "histogram", "gauge"]
_UNIT_WORDS = {"ms": "ms", "s": "seconds"}


@dataclass(frozen=True)
class Metric:
    """One metric: its OpenTelemetry name, kind, labels and (histograms) buckets."""

    name: str
    kind: Kind
    description: str
    labels: tuple[str, ...] = ()
    unit: str = ""
    buckets: tuple[float, ...] = ()

    @property
    def prometheus_name(self) -> str:
        """The name Prometheus shows (counters add ``_total``, histograms ``_bucket`` etc.):
        dots become underscores and the unit is spelled at the end."""
        base = self.name.replace(".", "_")
        word = _UNIT_WORDS.get(self.unit, self.unit)
        return base if not word or base.endswith(f"_{word}") else f"{base}_{word}"


def _lateness(name: str, description: str, labels: tuple[str, ...]) -> Metric:
    return Metric(name, "histogram", description, labels, "ms", LATENESS_BUCKETS_MS)


DISPATCH_LATENESS = _lateness(
    "tikk.dispatch.lateness", "Due time to the ready queue's acknowledgement", ("queue",)
)
DISPATCHED = Metric("tikk.tasks.dispatched", "counter", "Deliveries handed to the ready queue",
                    ("queue",))  # fmt: skip
RETRIES = Metric("tikk.retries", "counter", "Attempts retried", ("queue",))
DEAD_LETTERS = Metric("tikk.dead_letters", "counter", "Tasks given up", ("queue",))
STORE_READS = Metric(
    "tikk.dispatch.store_reads", "counter", "Reads of the due index by the dispatcher"
)
ROWS_READ = Metric(
    "tikk.dispatch.rows_read", "counter", "Rows the dispatcher's due-index reads returned"
)
RESENT = Metric("tikk.dispatch.resent", "counter", "Deliveries of tasks already DISPATCHED")
LATE_WRITES = Metric(
    "tikk.late_writes", "counter", "Due rows re-placed ahead of a cursor, by reason", ("reason",)
)
RESULTS_REFUSED = Metric(
    "tikk.results.refused", "counter", "Run results refused by the server, by reason", ("reason",)
)
DUPLICATE_RUNS = Metric(
    "tikk.results.duplicates", "counter", "Further runs of a succeeded attempt recorded",
    ("queue",),
)  # fmt: skip
AUTH_REFUSED = Metric(
    "tikk.auth.refused", "counter", "Calls and stream messages refused by auth, by code",
    ("method", "code"),
)  # fmt: skip
OCCURRENCES = Metric(
    "tikk.schedule.occurrences", "counter", "Schedule occurrences decided, by outcome",
    ("outcome",),
)  # fmt: skip
DUE_BACKLOG = Metric(
    "tikk.due.backlog", "gauge", "Rows due now that the queue has not yet accepted, per shard",
    ("shard",),
)  # fmt: skip
CURSOR_LAG = Metric(
    "tikk.dispatch.cursor_lag", "gauge", "Seconds between now and the shard's dispatch cursor",
    ("shard",), "s",
)  # fmt: skip
SHARDS_OWNED = Metric(
    "tikk.dispatch.shards_owned", "gauge", "Shards this dispatcher owns now (0: a standby)"
)
SHARD_COUNT = Metric("tikk.dispatch.shard_count", "gauge", "Shards of the task store, owned or not")
QUEUE_WAITING = Metric(
    "tikk.queue.waiting", "gauge",
    "Tasks in the ready queue not yet consumed for good, per queue", ("queue",),
)  # fmt: skip
QUEUE_OLDEST_AGE = Metric(
    "tikk.queue.oldest_age_ms", "gauge", "Age of the oldest task waiting in the ready queue",
    ("queue",), "ms",
)  # fmt: skip
RUN_START_LATENESS = _lateness(
    "tikk.run.start_lateness", "Due time to handler start", ("queue", "handler")
)
RUN_DURATION = _lateness("tikk.run.duration", "Handler start to finish", ("queue", "handler"))
RUNS = Metric("tikk.runs", "counter", "Runs by outcome", ("queue", "handler", "outcome"))
RESULTS_RECORDED = Metric(
    "tikk.results.recorded", "counter", "Runs the server recorded, by queue and status",
    ("queue", "status"),
)  # fmt: skip
RESULT_START_LATENESS = _lateness(
    "tikk.results.start_lateness",
    "Due time to handler start of each run the server recorded (as its worker reported)",
    ("queue",),
)

ALL: tuple[Metric, ...] = (
    DISPATCH_LATENESS, DISPATCHED, RETRIES, DEAD_LETTERS, STORE_READS, ROWS_READ, RESENT,
    LATE_WRITES, RESULTS_REFUSED, DUPLICATE_RUNS, AUTH_REFUSED, OCCURRENCES, DUE_BACKLOG,
    CURSOR_LAG, SHARDS_OWNED, SHARD_COUNT, QUEUE_WAITING, QUEUE_OLDEST_AGE,
    RUN_START_LATENESS, RUN_DURATION, RUNS, RESULTS_RECORDED, RESULT_START_LATENESS,
)  # fmt: skip

# The label values of one series of a gauge, in the order of its metric's labels.
Series = tuple[str, ...]


class MetricSink(Protocol):
    """Where recorded values go. Labels are passed by name and must be the metric's own."""

    def add(self, metric: Metric, amount: float, labels: Mapping[str, str]) -> None:
        """Add to a counter."""

    def observe(self, metric: Metric, value: float, labels: Mapping[str, str]) -> None:
        """Record one value of a histogram."""

    def set_gauge(self, metric: Metric, values: Mapping[Series, float]) -> None:
        """The gauge's series as they stand now: each given one set, any other dropped."""
