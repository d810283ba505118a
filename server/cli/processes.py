"""The long-lived processes: ``dev``, ``server``, ``dispatcher``, ``worker``; and ``migrate``."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.cli.options import (
    DEFAULT_SERVER,
    EXIT_IMPORT,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    backend_options,
    backend_urls,
    config_option,
    otel_option,
    parse_duration_ms,
    security_options,
    settings,
    transport,
    transport_options,
)
from tikk.errors import InvalidArgument, TikkError
from tikk.settings import Settings
from tikk.telemetry import Providers, open_telemetry
from tikk.urls import redact

if TYPE_CHECKING:
    from server.certs import DevPki
    from server.supervisor import Member
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
    """Serve in this process: alone (``member`` None) or as one member of a group, where only
    the first member runs the in-process parts and the supervisor announces the address."""
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

    telemetry = open_telemetry(args.otel, f"tikk-{args.command}")
    for worker in workers:
        _trace_worker(worker, telemetry.providers)

    def ready(port: int) -> None:
        if member is not None:
            member.serving(port)
        else:
            _announce(args.command, config, port, getattr(args, "dev_pki", None))

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        if member is not None:
            member.stop_with_supervisor(stop)
        await serve(
            config, stop, dispatcher=dispatcher and in_process_parts, workers=workers,
            on_ready=ready, telemetry=telemetry, reuse_port=member is not None,
        )  # fmt: skip

    return _run_process(args.command, main, telemetry)


def _as_member(config: Settings, member: Member) -> Settings:
    """A group member's settings: the group's address, and its share of each namespace's
    tasks per second (``server.quotas``)."""
    shares = replace(config.quotas, processes=member.role.count)
    return replace(config, listen=member.role.listen, quotas=shares)


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


def _announce(command: str, config: Settings, port: int, dev_pki: DevPki | None = None) -> None:
    """The line tests and tools wait for (``listening on HOST:PORT``), then the backends and,
    with ``tikk dev --tls``, how a client connects."""
    host = config.listen.rpartition(":")[0] or "127.0.0.1"
    print(f"tikk {command} listening on {host}:{port}", flush=True)
    print(f"  store {redact(config.store_url)}\n  queue {redact(config.queue_url)}", flush=True)
    if config.security.tls is not None:
        print(f"  tls {config.security.tls.cert_file}", flush=True)
    if dev_pki is not None:
        dev_ca = dev_pki.ca_cert
        print(f"  clients trust the development CA {dev_ca}", flush=True)
        target = f"{'127.0.0.1' if _wildcard(host) else host}:{port}"
        print(f"  e.g. tikk task list --server {target} --tls-ca {dev_ca}", flush=True)


def _supervise(args: argparse.Namespace, dispatcher: bool) -> int:
    """``--processes N``: N members on one port, run by a supervisor in this process."""
    from server.runtime import install_stop_signals
    from server.supervisor import StartFailed, Supervisor

    config = settings(args)
    group = Supervisor(_serve_member, (args, dispatcher), args.processes, config.listen)

    def serving(address: str) -> None:
        port = int(address.rpartition(":")[2])
        _announce(args.command, config, port, getattr(args, "dev_pki", None))
        print(f"  processes {' '.join(map(str, group.pids))}", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        await group.run(stop, serving)

    try:
        asyncio.run(main())
    except StartFailed as failed:
        print(f"tikk {args.command}: {failed}; no process serves", file=sys.stderr)
        return failed.code
    return EXIT_OK


def _serve_member(args: argparse.Namespace, dispatcher: bool, member: Member) -> None:
    """The body of one member, in the fresh interpreter the supervisor started."""
    # As ``tikk`` does at start; this interpreter did not run it.
    logging.basicConfig(
        level=os.environ.get("TIKK_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code = _serve_process(args, dispatcher, member)
    except InvalidArgument as exc:  # a bad option value found while starting
        print(f"tikk: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    sys.exit(code)


def _run_process(name: str, main: Callable[[], Any], telemetry: Any) -> int:
    """Run a long-lived process; a refusal at start-up (a store created with another shard
    count, say) is one clear line and exit code 1, not a traceback."""
    try:
        asyncio.run(main())
    except TikkError as exc:
        print(f"tikk {name}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        telemetry.shutdown()
    return EXIT_OK


def _trace_worker(worker: Worker, providers: Providers | None) -> None:
    """Give a worker without telemetry of its own the process's providers."""
    from worker_sdk.telemetry import NoTelemetry, RunTelemetry

    if providers is not None and type(worker.telemetry) is NoTelemetry:
        worker.telemetry = RunTelemetry(providers.tracer_provider, providers.meter_provider)


def _run_dispatcher(args: argparse.Namespace) -> int:
    from server.runtime import install_stop_signals, run_dispatcher

    telemetry = open_telemetry(args.otel, "tikk-dispatcher")

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        print("tikk dispatcher running", flush=True)
        await run_dispatcher(settings(args), stop, telemetry=telemetry)

    return _run_process("dispatcher", main, telemetry)


def _run_worker(args: argparse.Namespace) -> int:
    from server.runtime import install_stop_signals

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
    _trace_worker(worker, telemetry.providers)

    queue_url = backend_urls(_worker_queue(args)).get("queue")

    async def main() -> int:
        stop = asyncio.Event()
        install_stop_signals(stop)
        done: int = await worker.run(args.server, burst=args.burst, stop=stop, queue_url=queue_url)
        return done

    try:
        done = asyncio.run(main())
    except TikkError as exc:  # the queue refused the login: one clear line, not a traceback
        print(f"tikk worker: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        telemetry.shutdown()
    print(f"tikk worker finished {done} runs", flush=True)
    return EXIT_OK


def _apply_worker_flags(worker: Worker, args: argparse.Namespace) -> None:
    """The failover and transport flags of ``tikk worker`` onto the worker; ``ValueError``
    (``TransportError`` for the transport) naming a bad value, and then nothing changed."""

    def seconds(ms: int | None) -> float | None:
        return None if ms is None else ms / 1000  # a flag left out keeps the Worker's setting

    given = _given_transport(worker.transport, transport(args))
    # A channel connects lazily: opening one only reads the files and checks the token rule.
    given.channel(args.server).close()
    worker.set_failover(
        session_timeout_s=seconds(args.session_timeout),
        heartbeat_interval_s=seconds(args.heartbeat_interval),
        report_timeout_s=seconds(args.report_timeout),
    )
    worker.transport = given


def _given_transport(own: Transport, flags: Transport) -> Transport:
    """The worker's own transport with what the command line gives (flags, $TIKK_TOKEN) in
    place of its fields."""
    given = {name: value for name, value in vars(flags).items() if value}
    return replace(own, **given)


def _worker_queue(args: argparse.Namespace) -> argparse.Namespace:
    """A worker's ``--queue-url`` as ``backend_urls`` reads it: the config file's queue URL
    (``[backends] queue``) unless the option gives one."""
    return argparse.Namespace(config=args.config, queue=args.queue_url)


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
    for name, fn, help_text in [
        ("dev", _run_dev, "all in one: API server + dispatcher (+ workers), embedded"),
        ("server", _run_server, "the API server"),
    ]:
        _serving_command(sub, name, fn, help_text)

    p = sub.add_parser("dispatcher", help="a dispatcher: moves due tasks to the ready queue")
    backend_options(p)
    security_options(p, serves=False)
    p.set_defaults(func=_run_dispatcher)
    _worker_command(sub)
    _migrate_command(sub)


def _serving_command(sub: Any, name: str, fn: Callable[..., int], help_text: str) -> None:
    """``dev`` or ``server``: the options of a process serving the API."""
    p = sub.add_parser(name, help=help_text)
    backend_options(p)
    security_options(p, serves=True)
    p.add_argument("--listen", default="127.0.0.1:7070", help="host:port (port 0 = any)")
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


def _process_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return count


def _worker_command(sub: Any) -> None:
    p = sub.add_parser("worker", help="run a worker_sdk.Worker")
    p.add_argument("target", metavar="MODULE:ATTR")
    p.add_argument("--server", default=DEFAULT_SERVER)
    transport_options(p)
    p.add_argument("--burst", action="store_true", help="exit once the queues are empty")
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
        "--queue-url",
        metavar="URL",
        help="consume from this queue URL instead of the one the server hands out (which "
        "carries no password): e.g. with this worker's own password_file= or password_env=",
    )
    config_option(p)
    otel_option(p)
    p.set_defaults(func=_run_worker)


def _migrate_command(sub: Any) -> None:
    p = sub.add_parser("migrate", help="create or upgrade the Cassandra schema")
    backend_options(p)
    p.add_argument(
        "--replication",
        default="{'class': 'SimpleStrategy', 'replication_factor': 1}",
        help="keyspace replication map (used when the keyspace is created)",
    )
    p.set_defaults(func=_run_migrate)
