"""The overview's figures over time: rates and lateness quantiles over the last 5 and 60
minutes, and a line per minute for the live chart.

Read from the server's own metrics (``tikk.results.recorded``, ``tikk.results.start_lateness``,
and with an in-process dispatcher ``tikk.tasks.dispatched``): cumulative counts sampled every
few seconds, an hour of them kept, so a window is the difference between the newest sample and
an older one. A quantile is interpolated inside its bucket, as Prometheus's
``histogram_quantile`` does. Nothing here reads the store: the overview costs the same with
ten tasks stored or ten million.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tikk.clock import Clock
from tikk.metric_catalog import (
    DISPATCHED,
    QUEUE_WAITING,
    RESULT_START_LATENESS,
    RESULTS_RECORDED,
)
from tikk.metric_sinks import PrometheusMetrics

Samples = Mapping[tuple[str, tuple[tuple[str, str], ...]], float]
_KEEP_MS = 61 * 60_000
_LATENESS = RESULT_START_LATENESS.prometheus_name
# The only series the windows read: an hour of samples of every series (a gauge per shard
# among them) would hold hundreds of thousands of values for nothing.
# (The waiting gauge names every queue the server knows, runs or not.)
_READ = (
    RESULTS_RECORDED.prometheus_name + "_total", DISPATCHED.prometheus_name + "_total",
    _LATENESS + "_bucket", QUEUE_WAITING.prometheus_name,
)  # fmt: skip


@dataclass(frozen=True)
class QueueFigures:
    """One queue over one window: runs/s, failures/s, dispatches/s, start lateness p50/p99
    (None when nothing ran)."""

    runs_per_s: float
    failures_per_s: float
    dispatched_per_s: float
    p50_ms: float | None
    p99_ms: float | None


class MetricWindows:
    """Samples of the server's metrics kept for an hour (see the module)."""

    def __init__(self, metrics: PrometheusMetrics, clock: Clock, *, every_ms: int = 5_000) -> None:
        self._metrics = metrics
        self._clock = clock
        self._every_ms = every_ms
        self._taken: deque[tuple[int, Samples]] = deque()

    def sample(self) -> None:
        """Keep the counts as they stand now (and drop those older than an hour)."""
        now = self._clock.now_ms()
        kept = {k: v for k, v in self._metrics.samples().items() if k[0] in _READ}
        self._taken.append((now, kept))
        while self._taken and now - self._taken[0][0] > _KEEP_MS:
            self._taken.popleft()

    async def run(self) -> None:
        """Sample every few seconds until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(self._every_ms / 1000)

    def _pair(self, window_ms: int) -> tuple[int, Samples, Samples] | None:
        """(span ms, older, newest) samples for a window ending now; None before two."""
        if len(self._taken) < 2:
            return None
        newest_at, newest = self._taken[-1]
        times = [t for t, _ in self._taken]
        i = min(bisect.bisect_left(times, newest_at - window_ms), len(times) - 2)
        older_at, older = self._taken[i]
        return max(1, newest_at - older_at), older, newest

    def queues(self, window_ms: int) -> dict[str, QueueFigures]:
        """Each queue's figures over the last ``window_ms`` (as far back as sampled)."""
        pair = self._pair(window_ms)
        return {} if pair is None else figures(*pair)

    def chart(self) -> list[tuple[int, float | None, float | None]]:
        """(end of step, p50, p99) of every queue's start lateness, in up to 60 steps over
        what was sampled (a minute each once an hour is held)."""
        points: list[tuple[int, float | None, float | None]] = []
        if len(self._taken) < 2:
            return points
        step_ms = max(self._every_ms, (self._taken[-1][0] - self._taken[0][0]) // 60)
        last: tuple[int, Samples] | None = None
        for at, taken in self._taken:
            if last is None or at - last[0] >= step_ms:
                if last is not None:
                    buckets = _buckets(last[1], taken, None)
                    points.append((at, quantile(0.5, buckets), quantile(0.99, buckets)))
                last = (at, taken)
        return points


def figures(span_ms: int, older: Samples, newest: Samples) -> dict[str, QueueFigures]:
    """Each queue's figures between two samples ``span_ms`` apart."""
    per_s = 1000 / span_ms
    queues = {dict(labels).get("queue", "") for (_, labels) in newest} - {""}
    out = {}
    for queue in sorted(queues):
        runs = _delta(older, newest, RESULTS_RECORDED.prometheus_name + "_total", queue)
        failed = _delta(older, newest, RESULTS_RECORDED.prometheus_name + "_total", queue,
                        lambda labels: labels.get("status") != "succeeded")  # fmt: skip
        fired = _delta(older, newest, DISPATCHED.prometheus_name + "_total", queue)
        buckets = _buckets(older, newest, queue)
        out[queue] = QueueFigures(
            runs * per_s, failed * per_s, fired * per_s,
            quantile(0.5, buckets), quantile(0.99, buckets),
        )  # fmt: skip
    return out


def _delta(
    older: Samples, newest: Samples, name: str, queue: str,
    keep: Callable[[dict[str, str]], bool] | None = None,
) -> float:  # fmt: skip
    """How much the series ``name`` of ``queue`` (those ``keep`` accepts) grew."""
    total = 0.0
    for (sample, labels), value in newest.items():
        named = dict(labels)
        if sample != name or named.get("queue") != queue:
            continue
        if keep is not None and not keep(named):
            continue
        total += value - older.get((sample, labels), 0.0)
    return total


def _buckets(older: Samples, newest: Samples, queue: str | None) -> list[tuple[float, float]]:
    """(upper bound, runs at or under it) of the start lateness between two samples, of one
    queue or (None) of all, in bound order."""
    counts: dict[float, float] = {}
    for (sample, labels), value in newest.items():
        named = dict(labels)
        if sample != _LATENESS + "_bucket" or (queue is not None and named["queue"] != queue):
            continue
        bound = float(named["le"])
        counts[bound] = counts.get(bound, 0.0) + value - older.get((sample, labels), 0.0)
    return sorted(counts.items())


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of cumulative ``buckets``, interpolated inside its bucket; the
    largest finite bound when it falls in the last one; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            share = (rank - lower_count) / (count - lower_count) if count > lower_count else 0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return lower_bound
