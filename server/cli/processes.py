"""The long-lived processes: ``dev``, ``server`` (``serving``), ``dispatcher``, ``worker``
(``workers``); and ``migrate``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from server.cli.options import (
    EXIT_OK,
    EXIT_REFUSED,
    backend_options,
    metrics_option,
    security_options,
    settings,
)
from server.cli.serving import run_process, serving_commands
from server.cli.workers import prometheus_sink, worker_command
from tikk.errors import TikkError
from tikk.telemetry import open_telemetry


def _run_dispatcher(args: argparse.Namespace) -> int:
    from server.runtime import install_stop_signals, run_dispatcher
    from server.web.listener import metrics_listener
    from server.web.readiness import Readiness

    telemetry = open_telemetry(args.otel, "tikk-dispatcher")
    metrics = prometheus_sink(args, telemetry)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        print("tikk dispatcher running", flush=True)
        readiness = Readiness()
        async with metrics_listener(args.metrics, metrics, readiness):
            await run_dispatcher(settings(args), stop, telemetry=telemetry, readiness=readiness)

    return run_process("dispatcher", main, telemetry)


def _run_migrate(args: argparse.Namespace) -> int:
    from server.wiring import migrate
    from tikk.clock import SystemClock

    try:
        applied = migrate(settings(args), args.replication, SystemClock().now_ms())
    except TikkError as exc:
        print(f"tikk migrate: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    for step in applied:
        print(f"applied {step}")
    print("schema is up to date" if not applied else f"{len(applied)} step(s) applied")
    return EXIT_OK


def register(sub: Any) -> None:
    """``dev``, ``server``, ``dispatcher``, ``worker`` and ``migrate``."""
    serving_commands(sub)
    p = sub.add_parser("dispatcher", help="a dispatcher: moves due tasks to the ready queue")
    backend_options(p)
    security_options(p, serves=False)
    metrics_option(p)
    p.set_defaults(func=_run_dispatcher)
    worker_command(sub)
    _migrate_command(sub)


def _migrate_command(sub: Any) -> None:
    p = sub.add_parser("migrate", help="create or upgrade the Cassandra schema")
    backend_options(p)
    p.add_argument(
        "--replication",
        default="{'class': 'SimpleStrategy', 'replication_factor': 1}",
        help="keyspace replication map (used when the keyspace is created)",
    )
    p.set_defaults(func=_run_migrate)
