"""Running the processes of tikk: API server, dispatcher, and in-process workers.

Shutdown order (on SIGINT/SIGTERM): health NOT_SERVING → workers stop fetching and finish
in-flight runs → dispatcher stops and writes its cursors → API server stops with a grace
period → stores close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import Callable, Sequence

from dispatcher.ownership import Ownership
from dispatcher.scanner import Dispatcher
from dispatcher.schedule_steps import ScheduleStepper
from dispatcher.settings import DispatchSettings
from server.app import ApiServer
from server.ops.start_timeouts import StartTimeouts
from server.wiring import Backends, Drivers, open_backends, open_ownership
from tikk.clock import Clock, SystemClock
from tikk.delivery_tokens import DeliveryKeys, keys_for
from tikk.settings import Settings
from tikk.telemetry import Telemetry
from worker_sdk import Worker

log = logging.getLogger("tikk")


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


async def run_dispatcher(
    settings: Settings,
    stop: asyncio.Event,
    *,
    clock: Clock | None = None,
    dispatch: DispatchSettings | None = None,
    telemetry: Telemetry | None = None,
    drivers: Drivers | None = None,
    keys: DeliveryKeys | None = None,
) -> None:
    """Dispatch until ``stop``. Backends of its own (SQLite connections of its own), on the
    driver sessions of a server in the same process if given (``drivers``). Deliveries are
    signed with ``keys``, by default those of ``settings.security.delivery_keys_file``."""
    clock = clock or SystemClock()
    keys = keys or keys_for(settings.security.delivery_keys_file)
    backends = await open_backends(settings, drivers)
    try:
        ownership = await open_ownership(settings, epoch=clock.now_ms())
        try:
            dispatch = dispatch or DispatchSettings(
                late_write_grace_s=settings.late_write_grace_ms // 1000
            )
            await _dispatch(
                backends, ownership, stop, clock, dispatch=dispatch, telemetry=telemetry,
                keys=keys,
            )  # fmt: skip
        finally:
            await ownership.close()
    finally:
        await backends.close()


async def _dispatch(
    backends: Backends,
    ownership: Ownership,
    stop: asyncio.Event,
    clock: Clock,
    *,
    dispatch: DispatchSettings,
    telemetry: Telemetry | None,
    keys: DeliveryKeys,
) -> None:
    store, queue, history = backends.store, backends.queue, backends.history
    stepper = ScheduleStepper(backends.schedules, store, history, telemetry)
    dispatcher = Dispatcher(
        store, queue, ownership, clock, settings=dispatch, telemetry=telemetry,
        schedules=stepper, expiry=StartTimeouts(store, history, queue, telemetry), keys=keys,
    )  # fmt: skip
    await dispatcher.run(stop)


async def serve(
    settings: Settings,
    stop: asyncio.Event,
    *,
    dispatcher: bool = False,
    workers: Sequence[Worker] = (),
    on_ready: Callable[[int], None] = lambda port: None,
    clock: Clock | None = None,
    telemetry: Telemetry | None = None,
    reuse_port: bool = False,
) -> None:
    """Serve the API (and optionally dispatch and run workers in-process) until ``stop``.
    ``reuse_port``: other processes serve on the same port (see ``server.supervisor``)."""
    clock = clock or SystemClock()
    # One keyring for the server and its in-process dispatcher: they agree with no file.
    keys = keys_for(settings.security.delivery_keys_file)
    drivers = Drivers()
    backends = await open_backends(settings, drivers)
    rng = random.Random()
    api = ApiServer(settings, backends, clock, rng, telemetry, reuse_port=reuse_port, keys=keys)
    port = await api.start()
    background: list[asyncio.Task[object]] = []
    worker_stop = asyncio.Event()
    if dispatcher:
        dispatching = run_dispatcher(
            settings, stop, clock=clock, telemetry=telemetry, drivers=drivers, keys=keys
        )
        background.append(asyncio.create_task(dispatching))
    address = f"127.0.0.1:{port}"
    background += [asyncio.create_task(w.run(address, stop=worker_stop)) for w in workers]
    on_ready(port)
    try:
        await _until_stopped(stop, background)
    finally:
        worker_stop.set()
        stop.set()
        await asyncio.gather(*background, return_exceptions=True)
        await api.stop()
        await backends.close()


async def _until_stopped(stop: asyncio.Event, background: list[asyncio.Task[object]]) -> None:
    """Wait for ``stop``; a background part that dies takes the process down with it."""
    waiter = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([waiter, *background], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    for task in done:
        if task is not waiter and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())
            raise SystemExit(1)
