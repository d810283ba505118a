"""The console's overview figures: windows over the server's own metrics, on a manual clock,
and its sessions' expiry."""

from __future__ import annotations

import pytest

from server.web.console.sessions import ConsoleSessions
from server.web.console.stats import MetricWindows, quantile
from tests.factories import T0
from tikk.clock import ManualClock
from tikk.metric_sinks import PrometheusMetrics
from tikk.telemetry import Telemetry


def test_a_quantile_is_interpolated_inside_its_bucket_as_prometheus_does() -> None:
    # 10 runs: 4 at or under 10 ms, 9 at or under 100 ms, all at or under 1 s.
    buckets = [(10.0, 4.0), (100.0, 9.0), (1000.0, 10.0), (float("inf"), 10.0)]
    assert quantile(0.4, buckets) == pytest.approx(10.0)
    assert quantile(0.5, buckets) == pytest.approx(10 + 90 * (5 - 4) / (9 - 4))
    assert quantile(0.99, buckets) == pytest.approx(100 + 900 * 0.9)
    assert quantile(0.5, [(10.0, 0.0), (float("inf"), 0.0)]) is None
    assert quantile(0.99, [(10.0, 1.0), (float("inf"), 5.0)]) == 10.0  # past the last bound


def test_windows_count_only_what_happened_inside_them() -> None:
    clock = ManualClock(T0)
    metrics = PrometheusMetrics()
    telemetry = Telemetry([metrics])
    windows = MetricWindows(metrics, clock, every_ms=5_000)
    windows.sample()
    for _ in range(30):  # an hour ago: outside the 5-minute window, inside the hour
        telemetry.run_recorded("q", "failed", 3_000)
    clock.advance(55 * 60_000)
    windows.sample()
    for _ in range(60):
        telemetry.run_recorded("q", "succeeded", 20)
    clock.advance(5 * 60_000)
    windows.sample()
    five = windows.queues(5 * 60_000)["q"]
    assert five.runs_per_s == pytest.approx(60 / 300)
    assert five.failures_per_s == 0
    assert five.p50_ms is not None and 10 < five.p50_ms <= 25
    hour = windows.queues(60 * 60_000)["q"]
    assert hour.runs_per_s == pytest.approx(90 / 3_600)
    assert hour.failures_per_s == pytest.approx(30 / 3_600)
    assert hour.p99_ms is not None and 2_500 < hour.p99_ms <= 5_000
    assert [round(p50 or 0) for _, p50, _ in windows.chart()][-1] == round(five.p50_ms)


def test_nothing_is_shown_before_two_samples() -> None:
    metrics = PrometheusMetrics()
    windows = MetricWindows(metrics, ManualClock(T0))
    assert windows.queues(60_000) == {}
    windows.sample()
    assert windows.queues(60_000) == {} and windows.chart() == []


def test_an_idle_session_ends_and_a_stale_csrf_token_is_refused() -> None:
    now = [100.0]
    sessions = ConsoleSessions(None, monotonic=lambda: now[0])
    session = sessions.open()
    assert sessions.find(session.session_id) is session
    assert sessions.csrf_matches(session, session.csrf)
    assert not sessions.csrf_matches(session, session.csrf[:-1] + "x")
    now[0] += 9 * 3600
    assert sessions.find(session.session_id) is None
    assert sessions.find("not-a-session") is None
