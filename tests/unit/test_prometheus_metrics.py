"""Prometheus: every metric of the catalog in the exposition format, a scrape over a real HTTP
listener (with and without a token), and the sums of a multiprocess group read from files
that real separate processes wrote."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.auth.authenticator import CredentialView
from server.web.listener import HttpSite, metrics_app, start_http
from server.web.readiness import Readiness
from tests.factories import make_task
from tikk import metric_catalog
from tikk.credentials import Credential, Grant, issue_secret, new_credential_id
from tikk.metric_catalog import ALL
from tikk.metric_sinks import MULTIPROCESS_ENV, PrometheusMetrics
from tikk.model import Delivery
from tikk.store.sqlite.credentials import SqliteCredentialStore
from tikk.telemetry import QueueGauge, ShardGauge, Telemetry

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) → value, as a scraper reads them."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def at(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def scrape(url: str, token: str = "") -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_every_metric_of_the_catalog_is_exposed_with_its_type() -> None:
    text, content_type = PrometheusMetrics().exposition()
    assert content_type.startswith("text/plain; version=")
    families = {f.name: f.type for f in text_string_to_metric_families(text.decode())}
    expected = {
        m.prometheus_name: {"counter": "counter", "histogram": "histogram", "gauge": "gauge"}[
            m.kind
        ]
        for m in ALL
    }
    assert families == expected
    assert "tikk_dispatch_lateness_ms" in families
    assert "tikk_dispatch_cursor_lag_seconds" in families
    assert "tikk_queue_oldest_age_ms" in families  # the unit is not spelled twice


def test_what_the_telemetry_records_is_what_a_scrape_reads() -> None:
    metrics = PrometheusMetrics()
    telemetry = Telemetry([metrics])
    entry = make_task("a", due_ms=10_000).entry()
    with telemetry.dispatching([Delivery(entry, 10_120)]):
        pass
    telemetry.retried("q")
    telemetry.result_refused("missing")
    telemetry.report_queues({"q": QueueGauge(3, 1_500)})
    telemetry.report_shards({0: ShardGauge(2, 6), 1: ShardGauge(0, 6)}, shard_count=4)
    telemetry.report_shards({1: ShardGauge(0, 7)}, shard_count=4)  # shard 0 was lost
    got = samples(metrics.exposition()[0].decode())
    assert got[at("tikk_tasks_dispatched_total", queue="q")] == 1
    assert got[at("tikk_dispatch_lateness_ms_sum", queue="q")] == 120
    assert got[at("tikk_dispatch_lateness_ms_bucket", queue="q", le="250.0")] == 1
    assert got[at("tikk_dispatch_lateness_ms_bucket", queue="q", le="100.0")] == 0
    assert got[at("tikk_retries_total", queue="q")] == 1
    assert got[at("tikk_results_refused_total", reason="missing")] == 1
    assert got[at("tikk_queue_waiting", queue="q")] == 3
    assert got[at("tikk_queue_oldest_age_ms", queue="q")] == 1_500
    assert got[at("tikk_dispatch_shards_owned")] == 1
    assert got[at("tikk_dispatch_shard_count")] == 4
    lag = {k[1]: v for k, v in got.items() if k[0] == "tikk_dispatch_cursor_lag_seconds"}
    assert lag == {(("shard", "1"),): 7}


@pytest.fixture
async def credentials(tmp_path: Path) -> AsyncIterator[SqliteCredentialStore]:
    store = SqliteCredentialStore(str(tmp_path / "tikk.db"))
    await store.start()
    yield store
    await store.close()


async def _token(store: SqliteCredentialStore) -> str:
    credential_id = new_credential_id()
    issued = issue_secret(credential_id)
    grants = (Grant.parse("read:a"),)
    await store.create(Credential(credential_id, "c", issued.salt, issued.secret_hash, grants, 0))
    return issued.token


async def answers() -> None:
    return None


async def test_with_auth_a_scrape_needs_a_valid_token(
    credentials: SqliteCredentialStore,
) -> None:
    metrics = PrometheusMetrics()
    Telemetry([metrics]).retried("q")
    readiness = Readiness()
    readiness.watch({"store": answers})
    site: HttpSite = await start_http(
        "127.0.0.1:0", metrics_app(metrics, readiness, CredentialView(credentials))
    )
    try:
        url = site.url("127.0.0.1")
        token = await _token(credentials)
        unsent = await asyncio.to_thread(scrape, url + "metrics")
        wrong = await asyncio.to_thread(scrape, url + "metrics", "tikk_x_y")
        sent = await asyncio.to_thread(scrape, url + "metrics", token)
        health = await asyncio.to_thread(scrape, url + "healthz")
        ready = await asyncio.to_thread(scrape, url + "readyz")
    finally:
        await site.stop()
    assert unsent[0] == 401 and "Bearer" in unsent[1]
    assert wrong[0] == 401 and "tikk_x_y" not in wrong[1]
    assert sent[0] == 200
    assert samples(sent[1])[at("tikk_retries_total", queue="q")] == 1
    assert health == (200, "ok\n")
    assert ready == (200, '{"store": "ok"}')  # a probe, like a kubelet's, needs no token


async def test_an_address_in_use_is_refused_naming_it() -> None:
    first = await start_http("127.0.0.1:0", metrics_app(PrometheusMetrics(), Readiness()))
    try:
        with pytest.raises(Exception, match=f"cannot listen on 127.0.0.1:{first.port}"):
            await start_http(
                f"127.0.0.1:{first.port}", metrics_app(PrometheusMetrics(), Readiness())
            )
    finally:
        await first.stop()


_RECORD = """
import sys
from tikk.metric_sinks import PrometheusMetrics
from tikk.telemetry import QueueGauge, Telemetry
telemetry = Telemetry([PrometheusMetrics()])
for _ in range(int(sys.argv[1])):
    telemetry.dead_lettered("q")
telemetry.report_queues({"q": QueueGauge(int(sys.argv[2]), 0)})
"""


def test_a_group_scrape_adds_up_its_processes_and_keeps_the_counts_of_dead_ones(
    tmp_path: Path,
) -> None:
    """Two real processes record into the shared directory and exit; a third reads the sum."""
    env = {**os.environ, MULTIPROCESS_ENV: str(tmp_path), "PYTHONPATH": str(ROOT)}
    for count, waiting in ((3, 10), (4, 11)):
        subprocess.run(
            [sys.executable, "-c", _RECORD, str(count), str(waiting)], env=env, check=True,
            timeout=60,
        )  # fmt: skip
    reader = (
        "from tikk.metric_sinks import PrometheusMetrics;"
        "print(PrometheusMetrics().exposition()[0].decode())"
    )
    out = subprocess.run(
        [sys.executable, "-c", reader], env=env, check=True, timeout=60, capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    got = samples(out)
    assert got[at("tikk_dead_letters_total", queue="q")] == 7
    # A gauge is the cluster's figure each process reports: the one set last, not a sum.
    assert got[at("tikk_queue_waiting", queue="q")] == 11


def test_the_catalog_names_each_metric_once() -> None:
    names = [m.name for m in ALL]
    assert len(names) == len(set(names))
    declared = {
        v.name for v in vars(metric_catalog).values() if isinstance(v, metric_catalog.Metric)
    }
    assert declared == set(names)
