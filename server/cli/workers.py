"""``worker``: run a ``worker_sdk.Worker``; and loading a worker target (``MODULE:ATTR``),
which ``dev`` and ``server`` do too for ``--worker``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.cli.options import (
    EXIT_IMPORT,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    backend_urls,
    config_option,
    log_format_option,
    metrics_option,
    otel_option,
    parse_duration_ms,
    server_option,
    transport,
    transport_options,
)
from tikk.errors import BackendUnavailable, TikkError
from tikk.metric_sinks import OtelMetrics, PrometheusMetrics
from tikk.telemetry import Telemetry, open_telemetry

if TYPE_CHECKING:
    from server.web.readiness import Readiness
    from tikk.client.transport import Transport
    from worker_sdk import Worker

_OUR_PACKAGES = {"tikk", "server", "dispatcher", "worker_sdk", "history"}


def load_worker(target: str) -> Any:
    """Import ``module:attribute``. The module is looked up after our own packages, so a
    user's file cannot shadow tikk's, and a name that collides is refused clearly."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ImportError(f"worker target must be MODULE:ATTRIBUTE, got {target!r}")
    if module_name.split(".")[0] in _OUR_PACKAGES:
        raise ImportError(f"worker module {module_name!r} collides with a tikk package name")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.append(cwd)
    obj = getattr(importlib.import_module(module_name), attr, None)
    from worker_sdk import Worker

    if not isinstance(obj, Worker):
        raise ImportError(f"{target} is not a worker_sdk.Worker")
    return obj


def trace_worker(worker: Worker, telemetry: Telemetry) -> None:
    """Give a worker without telemetry of its own the process's: traces and metrics through
    its providers, and its other metric sinks (Prometheus)."""
    from worker_sdk.telemetry import NoTelemetry, RunMetrics, RunTelemetry

    if type(worker.telemetry) is not NoTelemetry:
        return
    others = [s for s in telemetry.sinks if not isinstance(s, OtelMetrics)]
    p = telemetry.providers
    if p is not None:
        worker.telemetry = RunTelemetry(p.tracer_provider, p.meter_provider, sinks=others)
    elif others:
        worker.telemetry = RunMetrics(others)


def prometheus_sink(args: argparse.Namespace, telemetry: Telemetry) -> PrometheusMetrics | None:
    """With ``--metrics``, the Prometheus sink ``telemetry`` now records into too."""
    if not args.metrics:
        return None
    metrics = PrometheusMetrics()
    telemetry.with_sink(metrics)
    return metrics


def _run_worker(args: argparse.Namespace) -> int:
    from server.runtime import install_stop_signals, settle_heap
    from server.web.listener import metrics_listener

    try:
        worker = load_worker(args.target)
    except ImportError as exc:
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_IMPORT

    try:
        _apply_worker_flags(worker, args)
    except ValueError as exc:  # TransportError among them
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_USAGE

    telemetry = open_telemetry(args.otel, "tikk-worker")
    metrics = prometheus_sink(args, telemetry)
    trace_worker(worker, telemetry)
    queue_url = backend_urls(_worker_queue(args)).get("queue")

    async def main() -> int:
        stop = asyncio.Event()
        install_stop_signals(stop)
        async with metrics_listener(args.metrics, metrics, worker_readiness(worker)):
            done: int = await worker.run(
                args.server, burst=args.burst, stop=stop, queue_url=queue_url
            )
        return done

    settle_heap()
    try:
        done = asyncio.run(main())
    except TikkError as exc:  # the queue refused the login: one clear line, not a traceback
        print(f"tikk worker: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        telemetry.shutdown()
    print(f"tikk worker finished {done} runs", flush=True)
    return EXIT_OK


def worker_readiness(worker: Worker) -> Readiness:
    """A worker is ready while its results reach a server (``Worker.reporting``)."""
    from server.web.readiness import Readiness

    async def server() -> None:
        if not worker.reporting():
            raise BackendUnavailable("no result stream open to a server, or none acknowledging")

    readiness = Readiness()
    readiness.watch({"server": server})
    return readiness


def _apply_worker_flags(worker: Worker, args: argparse.Namespace) -> None:
    """The failover and transport flags of ``tikk worker`` onto the worker; ``ValueError``
    (``TransportError`` for the transport) naming a bad value, and then nothing changed."""

    def seconds(ms: int | None) -> float | None:
        return None if ms is None else ms / 1000  # a flag left out keeps the Worker's setting

    from worker_sdk.inflight import backlog_for

    backlog = worker.result_backlog
    if args.result_backlog is not None:
        backlog = backlog_for(worker.concurrency, args.result_backlog)
    given = _given_transport(worker.transport, transport(args))
    # A channel connects lazily: opening one only reads the files and checks the token rule.
    given.channel(args.server).close()
    worker.set_failover(
        session_timeout_s=seconds(args.session_timeout),
        heartbeat_interval_s=seconds(args.heartbeat_interval),
        report_timeout_s=seconds(args.report_timeout),
        instance_id=args.instance_id,
    )
    worker.transport = given
    worker.result_backlog = backlog


def _given_transport(own: Transport, flags: Transport) -> Transport:
    """The worker's own transport with what the command line gives (flags, $TIKK_TOKEN) in
    place of its fields."""
    given = {name: value for name, value in vars(flags).items() if value}
    return replace(own, **given)


def _worker_queue(args: argparse.Namespace) -> argparse.Namespace:
    """A worker's ``--queue-url`` as ``backend_urls`` reads it: the config file's queue URL
    (``[backends] queue``) unless the option gives one."""
    return argparse.Namespace(config=args.config, queue=args.queue_url)


def worker_command(sub: Any) -> None:
    p = sub.add_parser("worker", help="run a worker_sdk.Worker")
    p.add_argument("target", metavar="MODULE:ATTR")
    server_option(p)
    transport_options(p)
    p.add_argument("--burst", action="store_true", help="exit once the queues are empty")
    _failover_options(p)
    p.add_argument(
        "--queue-url",
        metavar="URL",
        help="consume from this queue URL instead of the one the server hands out (which "
        "carries no password): e.g. with this worker's own password_file= or password_env=",
    )
    config_option(p)
    otel_option(p)
    log_format_option(p)
    metrics_option(p)
    p.set_defaults(func=_run_worker)


def _failover_options(p: argparse.ArgumentParser) -> None:
    """The flags ``Worker.set_failover`` takes: group timing and membership, report timeout."""
    p.add_argument(
        "--session-timeout",
        type=parse_duration_ms,
        metavar="DURATION",
        help="Kafka consumer-group session: a killed worker's partitions move after about "
        "this long (default 6s, the brokers' minimum)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=parse_duration_ms,
        metavar="DURATION",
        help="Kafka consumer-group heartbeat, under a third of the session (default 1s)",
    )
    p.add_argument(
        "--report-timeout",
        type=parse_duration_ms,
        metavar="DURATION",
        help="results unacknowledged this long: stop consuming so others take over, "
        "resume when the server acknowledges again (default 15s)",
    )
    p.add_argument(
        "--result-backlog",
        type=int,
        metavar="N",
        help="messages held, running or with a result the server has not acknowledged, at "
        "least the worker's concurrency (default: the concurrency); a worker starts at most "
        "this many per acknowledgement time",
    )
    p.add_argument(
        "--instance-id",
        metavar="NAME",
        help="Kafka static membership: a stable name of this worker's place (one per live "
        "worker, kept across its restarts), so that a restart within the session moves no "
        "partition of the others (default: none, a dynamic member)",
    )
