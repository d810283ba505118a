"""``dev`` and ``server``: serve the API in this process, or from a group of processes on one
port under a supervisor (``--processes``); and running any long-lived process with one clear
line for a refusal at start-up (``run_process``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.cli.options import (
    EXIT_IMPORT,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    backend_options,
    http_address,
    parse_duration_ms,
    security_options,
    settings,
)
from server.cli.workers import load_worker, trace_worker
from server.log_format import configure_logging
from tikk.errors import InvalidArgument, TikkError
from tikk.metric_sinks import MULTIPROCESS_ENV, PrometheusMetrics
from tikk.settings import Settings
from tikk.telemetry import Telemetry, open_telemetry
from tikk.urls import redact

if TYPE_CHECKING:
    from server.certs import DevPki
    from server.runtime import Listening
    from server.supervisor import Member
    from worker_sdk import Worker


def _run_dev(args: argparse.Namespace) -> int:
    return _serve(args, dispatcher=True)


def _run_server(args: argparse.Namespace) -> int:
    return _serve(args, dispatcher=False)


def _serve(args: argparse.Namespace, dispatcher: bool) -> int:
    """Refuse what must not be served (an exposed plaintext port, unusable TLS files) with
    exit code 2 before anything starts, then serve alone or as a group."""
    from server.certs import TlsExtraMissing
    from server.transport_security import check_transport

    try:
        _dev_tls(args)
        check_transport(settings(args))
    except (InvalidArgument, TlsExtraMissing, OSError) as exc:
        print(f"tikk {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.processes > 1:
        return _supervise(args, dispatcher)
    return _serve_process(args, dispatcher, None)


def _dev_tls(args: argparse.Namespace) -> None:
    """``tikk dev --tls``: serve with a development PKI under ``<data-dir>/tls`` (made once,
    reused after; ``server.certs``). Its paths go into ``args``, so the members of a group
    serve the same files."""
    if not getattr(args, "tls", False):
        return
    if args.tls_cert or args.tls_key:
        raise InvalidArgument("--tls", "makes its own certificate: leave out --tls-cert/--tls-key")
    from server.certs import DEV_HOSTS, make_dev_pki

    host = _listen_host(args.listen)
    hosts = (
        (*DEV_HOSTS, host) if host and host not in DEV_HOSTS and not _wildcard(host) else DEV_HOSTS
    )
    pki = make_dev_pki(Path(args.data_dir, "tls").resolve(), hosts=hosts)
    args.tls_cert, args.tls_key = str(pki.server_cert), str(pki.server_key)
    args.dev_pki = pki


def _listen_host(listen: str) -> str:
    host = listen.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") else host


def _wildcard(host: str) -> bool:
    return host in {"", "0.0.0.0", "::"}


def _serve_process(args: argparse.Namespace, dispatcher: bool, member: Member | None) -> int:
    """Serve in this process: alone (``member`` None) or as a group's member, where only the
    first runs the in-process parts and the supervisor announces and holds the owner lock."""
    from server.runtime import install_stop_signals, serve

    in_process_parts = member is None or member.role.first
    config = settings(args)
    try:
        workers = _in_process_workers(args, config) if in_process_parts else []
    except ImportError as exc:
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_IMPORT
    except InvalidArgument as exc:
        print(f"tikk {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if member is not None:
        config = _as_member(config, member)

    telemetry, metrics = _telemetry(args, workers)

    def ready(at: Listening) -> None:
        if member is not None:
            member.serving(at.port)
        else:
            _announce(args.command, config, at, getattr(args, "dev_pki", None))

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        if member is not None:
            member.stop_with_supervisor(stop)
        await serve(
            config, stop, dispatcher=dispatcher and in_process_parts, workers=workers,
            on_ready=ready, telemetry=telemetry, metrics=metrics, reuse_port=member is not None,
            lock_store=member is None,
        )  # fmt: skip

    return run_process(args.command, main, telemetry)


def _telemetry(
    args: argparse.Namespace, workers: list[Worker]
) -> tuple[Telemetry, PrometheusMetrics | None]:
    """The process's telemetry (``--otel``), and with an HTTP listener its Prometheus sink,
    given to the in-process workers too. Every member of a group records (into the files the
    supervisor shares); the first serves them all."""
    telemetry = open_telemetry(args.otel, f"tikk-{args.command}")
    metrics = PrometheusMetrics() if http_address(args) else None
    if metrics is not None:
        telemetry.with_sink(metrics)
    for worker in workers:
        trace_worker(worker, telemetry)
    return telemetry, metrics


def _as_member(config: Settings, member: Member) -> Settings:
    """A group member's settings: the group's address; the first member serves HTTP."""
    http = config.http if member.role.first else ""
    return replace(config, listen=member.role.listen, http=http)


def _in_process_workers(args: argparse.Namespace, config: Settings) -> list[Worker]:
    """The ``--worker`` targets, each reaching this server; ``ImportError`` for a target that
    does not load, ``InvalidArgument`` for one that cannot reach a TLS port."""
    workers = [load_worker(t) for t in args.worker]
    for worker in workers:
        _reach_own_server(worker, config, getattr(args, "dev_pki", None))
    return workers


def _reach_own_server(worker: Worker, config: Settings, dev_pki: DevPki | None) -> None:
    """An in-process worker reaches this server over its TLS: it trusts the development CA
    of ``tikk dev --tls``; with a certificate of the operator's, its own transport must."""
    if config.security.tls is None or worker.transport.ca_file:
        return
    if dev_pki is not None:
        # The development client certificate too, unless the worker has its own, should the
        # server ask for one (``--tls-client-ca``).
        own = worker.transport
        worker.transport = replace(
            own,
            ca_file=str(dev_pki.ca_cert),
            cert_file=own.cert_file or str(dev_pki.client_cert),
            key_file=own.key_file or str(dev_pki.client_key),
        )
    elif not worker.transport.secure:
        raise InvalidArgument(
            "--worker",
            "the server serves TLS, so an in-process worker needs a transport trusting its "
            "CA: Worker(..., transport=Transport(ca_file=...))",
        )


def _announce(command: str, config: Settings, at: Listening, dev_pki: DevPki | None = None) -> None:
    """The line tests and tools wait for (``listening on HOST:PORT``), then the backends, the
    HTTP listener's metrics URL and, with ``tikk dev --tls``, how a client connects."""
    host = config.listen.rpartition(":")[0] or "127.0.0.1"
    port = at.port
    print(f"tikk {command} listening on {host}:{port}", flush=True)
    print(f"  store {redact(config.store_url)}\n  queue {redact(config.queue_url)}", flush=True)
    if at.http_url:
        print(f"  metrics {at.http_url}metrics", flush=True)
        print(f"  console {at.http_url}console/", flush=True)
    if config.security.tls is not None:
        print(f"  tls {config.security.tls.cert_file}", flush=True)
    if dev_pki is not None:
        dev_ca = dev_pki.ca_cert
        print(f"  clients trust the development CA {dev_ca}", flush=True)
        target = f"{'127.0.0.1' if _wildcard(host) else host}:{port}"
        print(f"  e.g. tikk task list --server {target} --tls-ca {dev_ca}", flush=True)


def _supervise(args: argparse.Namespace, dispatcher: bool) -> int:
    """``--processes N``: N members on one port, run by a supervisor in this process. With
    the dispatcher (``tikk dev``) the supervisor holds the store's owner lock for the group,
    whose first member dispatches (and is started again under the same lock). A member
    outlives a ``kill -9`` of its supervisor only until it notices
    (``Member.stop_with_supervisor``); an owner started in that moment fences the member's
    dispatcher by its epoch."""
    from server.runtime import Listening, install_stop_signals, store_owner
    from server.supervisor import StartFailed, Supervisor

    args.http = _fixed_port(http_address(args)) or "off"
    config = settings(args)
    group = Supervisor(_serve_member, (args, dispatcher), args.processes, config.listen)

    def serving(address: str) -> None:
        at = Listening(_port(address), _group_http_url(config))
        _announce(args.command, config, at, getattr(args, "dev_pki", None))
        print(f"  processes {' '.join(map(str, group.pids))}", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        with store_owner(config) if dispatcher else contextlib.nullcontext():
            await group.run(stop, serving)

    try:
        with shared_metrics() if config.http else contextlib.nullcontext():
            asyncio.run(main())
    except StartFailed as failed:
        print(f"tikk {args.command}: {failed}; no process serves", file=sys.stderr)
        return failed.code
    except TikkError as exc:  # the store owned by another process, the address in use
        print(f"tikk {args.command}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


def _fixed_port(address: str) -> str:
    """``address`` with a free port in place of 0: a group's first member listens there, and
    again on the same port when it is started again."""
    if not address or _port(address) != 0:
        return address
    host = _listen_host(address)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host or "0.0.0.0", 0))
        return f"{address.rpartition(':')[0]}:{probe.getsockname()[1]}"


def _group_http_url(config: Settings) -> str:
    """The URL of a group's HTTP listener (its first member's, on a fixed port)."""
    if not config.http:
        return ""
    host = _listen_host(config.http)
    shown = "127.0.0.1" if _wildcard(host) else host
    return f"{'https' if config.security.tls else 'http'}://{shown}:{_port(config.http)}/"


def _port(address: str) -> int:
    port = address.rpartition(":")[2]
    return int(port) if port.isdigit() else 0


@contextlib.contextmanager
def shared_metrics() -> Iterator[None]:
    """A directory where the members of a group record their metrics and the first reads
    them all (``tikk.metric_sinks``), removed when the group ends."""
    folder = tempfile.mkdtemp(prefix="tikk-metrics-")
    os.environ[MULTIPROCESS_ENV] = folder  # the members inherit it
    try:
        yield
    finally:
        os.environ.pop(MULTIPROCESS_ENV, None)
        shutil.rmtree(folder, ignore_errors=True)


def _serve_member(args: argparse.Namespace, dispatcher: bool, member: Member) -> None:
    """The body of one member, in the fresh interpreter the supervisor started."""
    # As ``tikk`` does at start; this interpreter did not run it.
    configure_logging(getattr(args, "log_format", None))
    try:
        code = _serve_process(args, dispatcher, member)
    except InvalidArgument as exc:  # a bad option value found while starting
        print(f"tikk: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    sys.exit(code)


def run_process(name: str, main: Callable[[], Any], telemetry: Any) -> int:
    """Run a long-lived process; a refusal at start-up (a store created with another shard
    count, say) is one clear line and exit code 1, not a traceback."""
    from server.runtime import settle_heap

    settle_heap()
    try:
        asyncio.run(main())
    except TikkError as exc:
        print(f"tikk {name}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        telemetry.shutdown()
    return EXIT_OK


def serving_commands(sub: Any) -> None:
    """``dev`` and ``server``."""
    for name, fn, help_text in [
        ("dev", _run_dev, "all in one: API server + dispatcher (+ workers), embedded"),
        ("server", _run_server, "the API server"),
    ]:
        _serving_command(sub, name, fn, help_text)


def _serving_command(sub: Any, name: str, fn: Callable[..., int], help_text: str) -> None:
    """``dev`` or ``server``: the options of a process serving the API."""
    p = sub.add_parser(name, help=help_text)
    backend_options(p)
    security_options(p, serves=True)
    p.add_argument("--listen", default="127.0.0.1:7070", help="host:port (port 0 = any)")
    _http_option(p, "auto" if name == "dev" else "off")
    p.add_argument(
        "--visibility-timeout",
        type=parse_duration_ms,
        default=60_000,
        help="how long a worker may hold a task before redelivery (e.g. 60s)",
    )
    p.add_argument(
        "--worker",
        action="append",
        default=[],
        metavar="MODULE:ATTR",
        help="also run this worker in-process (repeatable)",
    )
    p.add_argument(
        "--processes",
        type=_process_count,
        default=1,
        metavar="N",
        help="serve from N processes on one port (SO_REUSEPORT), under a supervisor that "
        "restarts them; the dispatcher and --worker run in the first only (default 1)",
    )
    if name == "dev":
        p.add_argument(
            "--tls",
            action="store_true",
            help="serve TLS with a development certificate made (once) under "
            "<data-dir>/tls; prints the CA clients trust",
        )
    p.set_defaults(func=fn)


def _http_option(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--http",
        default=default,
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus) and /healthz here, over the API's TLS and tokens; "
        f"'auto': the port after --listen's; 'off': none (default: {default})",
    )


def _process_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return count
