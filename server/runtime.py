"""Running the processes of tikk: API server, dispatcher, and in-process workers.

Shutdown order (on SIGINT/SIGTERM): health NOT_SERVING → workers stop fetching and finish
in-flight runs → dispatcher stops and writes its cursors → API server stops with a grace
period → stores close.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import logging
import random
import signal
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dispatcher.ownership import Ownership
from dispatcher.scanner import Dispatcher
from dispatcher.schedule_steps import ScheduleStepper
from server.app import ApiServer
from server.auth.authenticator import CredentialView
from server.ops.start_timeouts import StartTimeouts
from server.start_patience import patiently
from server.web.browser_guard import HostRules, guard
from server.web.console.routes import Console
from server.web.console.sessions import ConsoleSessions
from server.web.console.stats import MetricWindows
from server.web.listener import HttpSite, metrics_app, start_http
from server.web.readiness import Check, Readiness
from server.wiring import Backends, Drivers, open_backends, open_ownership
from tikk.clock import Clock, SystemClock
from tikk.delivery_tokens import DeliveryKeys, keys_for
from tikk.metric_sinks import PrometheusMetrics
from tikk.settings import DispatchSettings, Settings
from tikk.store.sqlite.owner_lock import OwnerLock
from tikk.telemetry import Telemetry
from worker_sdk import Worker

log = logging.getLogger("tikk")


@dataclass(frozen=True)
class Listening:
    """Where a started server answers: its gRPC port, and its HTTP listener's URL ("" if
    none)."""

    port: int
    http_url: str = ""


def settle_heap() -> None:
    """Take what a long-lived process built while starting (its modules and their tables,
    most of its heap) out of the garbage collector's sight, so that a full collection scans
    only what the work itself keeps alive.

    A started worker tracks about 60,000 objects that never become garbage, and a full
    collection scanned them all with what the work made: bench-peers B (2,000 fires/s, a
    500 ms lead) saw 16 collections of 36-91 ms in its two workers, each a stall of every
    start due meanwhile, against 2-5 of at most 28 ms once frozen. Deliveries held until
    their due time (the dispatcher's lead) live long enough to reach the oldest generation,
    which makes full collections more frequent. Frozen objects are never freed, so this is
    called once, after start-up's garbage was collected."""
    gc.collect()
    gc.freeze()


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


def store_owner(settings: Settings) -> contextlib.AbstractContextManager[object]:
    """The owner lock of the embedded task store, taken now, to hold while this process
    dispatches from it as the one owner of every shard (``tikk.store.sqlite.owner_lock``);
    ``FailedPrecondition`` naming the pid of the process holding it. Nothing to hold with
    ZooKeeper ownership (the dispatchers divide the shards) or a store that is not a SQLite
    file. A ``tikk server`` dispatches nothing, so it shares the files with their owner."""
    directory = _single_owner_store(settings)
    return OwnerLock.take(directory) if directory is not None else contextlib.nullcontext()


def _single_owner_store(settings: Settings) -> Path | None:
    """The directory of the SQLite task store a dispatcher of ``settings`` would own alone."""
    if settings.ownership_url:
        return None
    # A URL that does not parse is refused with its own message when the store opens.
    scheme, sep, path = settings.store_url.partition("://")
    if scheme != "sqlite" or not sep or path in ("", ":memory:"):
        return None
    return Path(path).resolve().parent


async def run_dispatcher(
    settings: Settings,
    stop: asyncio.Event,
    *,
    clock: Clock | None = None,
    dispatch: DispatchSettings | None = None,
    telemetry: Telemetry | None = None,
    drivers: Drivers | None = None,
    keys: DeliveryKeys | None = None,
    lock_store: bool = True,
    readiness: Readiness | None = None,
) -> None:
    """Dispatch until ``stop``. Backends of its own (SQLite connections of its own), on the
    driver sessions of a server in the same process if given (``drivers``). Deliveries are
    signed with ``keys``, by default those of ``settings.security.delivery_keys_file``.
    ``lock_store``: hold the store's owner lock meanwhile (``store_owner``); False when the
    caller holds it. ``readiness`` (a ``--metrics`` listener's): judged by the backends and
    the ownership session while they are open."""
    clock = clock or SystemClock()
    grace_s = settings.late_write_grace_ms // 1000  # one grace for servers and dispatchers
    dispatch = dispatch or dataclasses.replace(settings.dispatch, late_write_grace_s=grace_s)
    with store_owner(settings) if lock_store else contextlib.nullcontext():
        backends, _ = await _open_backends(settings, stop, clock, drivers)
        try:
            # Read after the backends opened: they make the data dir private (0700), and the
            # keys file (``<data-dir>/delivery-keys`` by default) would make it open to all.
            keys = keys or keys_for(settings.security.delivery_keys_file)
            ownership = await _open_ownership(settings, stop, clock)
            try:
                await _dispatch(
                    backends, ownership, stop, clock, dispatch=dispatch, telemetry=telemetry,
                    keys=keys, readiness=readiness or Readiness(),
                )  # fmt: skip
            finally:
                await ownership.close()
        finally:
            await backends.close()


async def _open_backends(
    settings: Settings, stop: asyncio.Event, clock: Clock, drivers: Drivers | None = None
) -> tuple[Backends, Drivers]:
    """``open_backends`` with patience (``server.start_patience``), and the driver sessions
    they use. Without ``drivers`` (a server's, already connected) each attempt has sessions
    of its own: those of a failed attempt were shut down with the backends it had opened."""

    async def attempt() -> tuple[Backends, Drivers]:
        sessions = drivers or Drivers()
        return await open_backends(settings, sessions), sessions

    patience_ms = settings.start_patience_ms
    return await patiently(
        attempt, what="the backends", patience_ms=patience_ms, clock=clock, stop=stop
    )


async def _open_ownership(settings: Settings, stop: asyncio.Event, clock: Clock) -> Ownership:
    """``open_ownership`` with patience (``server.start_patience``), epoch the attempt's."""
    return await patiently(
        lambda: open_ownership(settings, epoch=clock.now_ms()),
        what="shard ownership",
        patience_ms=settings.start_patience_ms,
        clock=clock,
        stop=stop,
    )


async def _dispatch(
    backends: Backends,
    ownership: Ownership,
    stop: asyncio.Event,
    clock: Clock,
    *,
    dispatch: DispatchSettings,
    telemetry: Telemetry | None,
    keys: DeliveryKeys,
    readiness: Readiness,
) -> None:
    store, queue, history = backends.store, backends.queue, backends.history
    stepper = ScheduleStepper(backends.schedules, store, history, clock, telemetry)
    dispatcher = Dispatcher(
        store, queue, ownership, clock, settings=dispatch, telemetry=telemetry,
        schedules=stepper, expiry=StartTimeouts(store, history, queue, telemetry), keys=keys,
        holds=backends.queue_holds,
    )  # fmt: skip
    readiness.watch({**backend_checks(backends), "ownership": ownership.ping})
    try:
        await dispatcher.run(stop)
    finally:
        readiness.unwatch()


def backend_checks(backends: Backends) -> dict[str, Check]:
    """What a server's or dispatcher's readiness asks: that its task store, run history and
    ready queue each answer a ping."""
    return {
        "store": backends.store.ping,
        "history": backends.history.ping,
        "queue": backends.queue.ping,
    }


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    *,
    dispatcher: bool = False,
    workers: Sequence[Worker] = (),
    on_ready: Callable[[Listening], None] = lambda at: None,
    clock: Clock | None = None,
    telemetry: Telemetry | None = None,
    metrics: PrometheusMetrics | None = None,
    reuse_port: bool = False,
    lock_store: bool = True,
) -> None:
    """Serve the API (and optionally dispatch and run workers in-process) until ``stop``;
    ``metrics`` on ``settings.http`` (no listener without them). ``reuse_port``: other
    processes serve on the same port (``server.supervisor``). ``lock_store``: a process that
    dispatches holds the store's owner lock (``store_owner``), taken before anything opens;
    False for a group's member, whose supervisor holds it."""
    clock = clock or SystemClock()
    with store_owner(settings) if dispatcher and lock_store else contextlib.nullcontext():
        backends, drivers = await _open_backends(settings, stop, clock)
        try:
            # Read after the backends opened: they make the data dir private (0700), and the
            # keys file (``<data-dir>/delivery-keys`` by default) would make it open to all.
            # One keyring for the server and its in-process dispatcher: no file needed.
            keys = keys_for(settings.security.delivery_keys_file)
            api = ApiServer(settings, backends, clock, random.Random(), telemetry,
                            reuse_port=reuse_port, keys=keys)  # fmt: skip
            port = await api.start()
            site = await _start_http(settings, backends, api, metrics, clock)
            parts = [
                run_dispatcher(settings, stop, clock=clock, telemetry=telemetry,
                               drivers=drivers, keys=keys, lock_store=False)
            ] if dispatcher else []  # fmt: skip
            at = Listening(port, site.url(settings.http.rpartition(":")[0]) if site else "")
            ready = functools.partial(on_ready, at)
            await _serve_until_stopped(api, site, stop, parts, workers, on_ready=ready)
        finally:
            await backends.close()


async def _start_http(
    settings: Settings, backends: Backends, api: ApiServer, metrics: PrometheusMetrics | None,
    clock: Clock,
) -> HttpSite | None:  # fmt: skip
    """The HTTP listener (``server.web.listener``) with the console, if the settings ask for
    one; with ``--auth`` both check tokens against the same credentials as the API."""
    if not settings.http or metrics is None:
        return None
    view = None
    if settings.security.auth and backends.credentials is not None:
        view = CredentialView(backends.credentials)
    readiness = Readiness()
    readiness.watch(backend_checks(backends))
    app = metrics_app(metrics, readiness, view)
    windows = MetricWindows(metrics, clock)
    tls = settings.security.tls
    console = Console(api.ops, ConsoleSessions(view), windows, clock, secure_cookie=bool(tls))
    console.add_routes(app)
    security = settings.security
    rules = HostRules.of(
        settings.http, security.http_allowed_hosts, auth=security.auth, tls=tls is not None
    )
    guard(app, rules)
    site = await start_http(settings.http, app, tls)
    site.background.append(asyncio.create_task(windows.run(), name="tikk-console-stats"))
    return site


async def _serve_until_stopped(
    api: ApiServer, site: HttpSite | None, stop: asyncio.Event,
    parts: list[Coroutine[Any, Any, None]], workers: Sequence[Worker], *,
    on_ready: Callable[[], None],
) -> None:  # fmt: skip
    """Run ``parts`` (the dispatcher) and ``workers`` beside the started ``api`` until
    ``stop``, then stop them before the API (the order in this module's docstring)."""
    background: list[asyncio.Task[object]] = [asyncio.create_task(p) for p in parts]
    worker_stop = asyncio.Event()
    address = f"127.0.0.1:{api.port}"
    background += [asyncio.create_task(w.run(address, stop=worker_stop)) for w in workers]
    on_ready()
    try:
        await _until_stopped(stop, background)
    finally:
        worker_stop.set()
        stop.set()
        await asyncio.gather(*background, return_exceptions=True)
        if site is not None:
            await site.stop()
        await api.stop()


async def _until_stopped(stop: asyncio.Event, background: list[asyncio.Task[object]]) -> None:
    """Wait for ``stop``; a background part that dies takes the process down with it."""
    waiter = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([waiter, *background], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    for task in done:
        if task is not waiter and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())
            raise SystemExit(1)
