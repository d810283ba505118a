"""Several server processes on one port, and the supervisor that keeps them running.

``tikk server --processes N`` runs N server processes bound to one port with ``SO_REUSEPORT``,
so the kernel spreads new connections over them and ingest and result recording grow with
cores. Each is a fresh interpreter (multiprocessing's "spawn": a fork of a process whose gRPC
threads are running is unsafe). The supervisor process serves nothing itself.

The protocol between the supervisor and one server process (a *member*):

* The member is given its ``ProcessRole`` (its index, the group size, the address to bind)
  and the write end of a pipe. It sends the port it bound once it serves; a member that exits
  before that failed at start-up.
* The first member (index 0) starts alone, so that when port 0 is asked the others bind the
  port it picked. Only it runs the in-process parts (the embedded dispatcher, workers), which
  must not run twice.
* A member stops as on SIGTERM when the supervisor disappears (``kill -9`` of the supervisor
  leaves no orphan holding the port).

The supervisor's states:

* **checking**: an address another process listens on is refused before any member starts
  (``server.listen_address``).
* **starting**: a member that fails now (a bad setting, a store that refuses) stops the others
  and the supervisor exits with that member's exit code: a restart would fail the same way.
* **serving**: a member that exits is logged and started again with the same role after a
  backoff (0.5 s doubling to 30 s; back to 0.5 s once a member has served for a minute).
* **stopping** (SIGTERM or SIGINT): every member gets SIGTERM and its own graceful stop;
  one still running after the grace period is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from server.listen_address import refuse_if_taken
from tikk.metric_sinks import forget_process

log = logging.getLogger("tikk.supervisor")
T = TypeVar("T")

_FIRST_RESTART_S = 0.5
_MAX_RESTART_S = 30.0
# A member that served this long before it died starts the backoff from the beginning again.
_HEALTHY_AFTER_S = 60.0


@dataclass(frozen=True)
class ProcessRole:
    """Which member of a group a server process is."""

    index: int
    count: int
    # host:port to bind: the port the first member picked when port 0 was asked.
    listen: str

    @property
    def first(self) -> bool:
        """The member that also runs the in-process parts (dispatcher, workers)."""
        return self.index == 0

    def __str__(self) -> str:
        return f"process {self.index + 1} of {self.count}"


@dataclass(frozen=True)
class Member:
    """What a server process receives from its supervisor: its role and where to report."""

    role: ProcessRole
    _ready: Connection

    def serving(self, port: int) -> None:
        """Tell the supervisor this process serves on ``port`` (once)."""
        self._ready.send(port)
        self._ready.close()

    def stop_with_supervisor(self, stop: asyncio.Event) -> None:
        """Set ``stop`` when the supervisor process is gone (call inside the running loop)."""
        parent = multiprocessing.parent_process()
        if parent is None:
            return
        loop = asyncio.get_running_loop()

        def gone() -> None:
            loop.remove_reader(parent.sentinel)  # readable for good: report it once
            log.warning("%s: the supervisor is gone; stopping", self.role)
            stop.set()

        loop.add_reader(parent.sentinel, gone)


class StartFailed(Exception):
    """A member exited before it served; ``code`` is its exit code (never 0)."""

    def __init__(self, role: ProcessRole, code: int) -> None:
        super().__init__(f"{role} exited with code {code} before it served")
        self.code = code


# The body of a member: a module-level function (it is pickled by name), called in the new
# interpreter with the supervisor's ``args`` followed by the ``Member``.
Target = Callable[..., object]


@dataclass(frozen=True)
class _Launch:
    role: ProcessRole
    process: BaseProcess
    reader: Connection
    at: float


class Supervisor:
    """Runs ``count`` members, ``target(*args, member)``, on one port until stopped."""

    def __init__(
        self, target: Target, args: Sequence[object], count: int, listen: str, *,
        grace_s: float = 60.0,
    ) -> None:  # fmt: skip
        self._target = target
        self._args = tuple(args)
        self._count = count
        self._listen = listen
        self._grace_s = grace_s
        self._spawn = multiprocessing.get_context("spawn")
        self._members: dict[int, BaseProcess] = {}

    @property
    def pids(self) -> list[int]:
        """The process ids of the members, by index."""
        return [p.pid for _, p in sorted(self._members.items()) if p.pid is not None]

    async def run(self, stop: asyncio.Event, on_serving: Callable[[str], None]) -> None:
        """Start the members, call ``on_serving("host:port")`` once all serve, keep them
        running until ``stop``, then stop them all. Raises ``StartFailed`` (after stopping the
        others) if a member exits before it serves, and ``FailedPrecondition`` before starting
        any if another process listens on the address."""
        # The members bind with SO_REUSEPORT to share the port, and the kernel lets any other
        # socket of this user that asks for it share it too (another group's). A bind without
        # it fails while anyone listens, so an address already served is refused here; a
        # server alone binds without it, so neither joins the other. Not covered: a group
        # whose first member binds between this check and our first member's bind (the second
        # or so it takes to start), or while every member of ours is down and restarting,
        # shares the port with ours unnoticed; a server alone binding then makes our members
        # fail to start instead.
        refuse_if_taken(self._listen)
        try:
            address = await _unless_stopped(self._start_all(), stop)
            if address is not None:
                on_serving(address)
                await self._keep_running(address, stop)
        finally:
            await self._stop_all()

    async def _start_all(self) -> str:
        """The first member alone, then the others on the port it bound; "host:port"."""
        host = self._listen.rpartition(":")[0]
        port = await _served(self._launch(ProcessRole(0, self._count, self._listen)))
        address = f"{host}:{port}"
        others = [self._launch(ProcessRole(i, self._count, address)) for i in range(1, self._count)]
        for launch in others:
            await _served(launch)
        return address

    def _launch(self, role: ProcessRole) -> _Launch:
        reader, writer = self._spawn.Pipe(duplex=False)
        process = self._spawn.Process(
            target=self._target, args=(*self._args, Member(role, writer)), name=f"tikk {role}"
        )
        process.start()
        writer.close()  # the member holds the only write end: its exit reads as end of file
        self._members[role.index] = process
        return _Launch(role, process, reader, time.monotonic())

    async def _keep_running(self, address: str, stop: asyncio.Event) -> None:
        roles = [ProcessRole(i, self._count, address) for i in range(self._count)]
        keepers = [asyncio.create_task(self._keep(role)) for role in roles]
        try:
            await stop.wait()
        finally:
            for keeper in keepers:
                keeper.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)

    async def _keep(self, role: ProcessRole) -> None:
        """Start ``role`` again, after a backoff, whenever its process exits."""
        quick_exits = 0
        since = time.monotonic()
        while True:
            process = self._members[role.index]
            await _readable(process.sentinel)
            process.join()
            if process.pid is not None:
                forget_process(process.pid)  # its live gauges; its counts stay in the sums
            served_long = time.monotonic() - since >= _HEALTHY_AFTER_S
            quick_exits = 0 if served_long else quick_exits + 1
            delay = min(_MAX_RESTART_S, _FIRST_RESTART_S * 2 ** (quick_exits - 1))
            log.warning(
                "%s (pid %s) exited with code %s; starting it again in %.1f s",
                role, process.pid, process.exitcode, delay,
            )  # fmt: skip
            await asyncio.sleep(delay)
            launch = self._launch(role)
            since = launch.at
            with contextlib.suppress(StartFailed):  # logged as an exit on the next turn
                await _served(launch)
                log.warning("%s started again as pid %s", role, launch.process.pid)

    async def _stop_all(self) -> None:
        """SIGTERM to every member, SIGKILL to those still running after the grace period."""
        running = [p for p in self._members.values() if p.exitcode is None]
        for process in running:
            process.terminate()
        exits = asyncio.gather(*(_readable(p.sentinel) for p in running))
        try:
            await asyncio.wait_for(exits, self._grace_s)
        except TimeoutError:
            for process in running:
                if process.is_alive():
                    log.error("pid %s still runs %.0f s after SIGTERM; killed", process.pid,
                              self._grace_s)  # fmt: skip
                    process.kill()
        for process in running:
            process.join()


async def _served(launch: _Launch) -> int:
    """The port ``launch``'s member reports once it serves; ``StartFailed`` if it exits first."""
    try:
        await _readable(launch.reader.fileno())
        port: int = launch.reader.recv()
        return port
    except EOFError:
        await _readable(launch.process.sentinel)
        launch.process.join()
        code = launch.process.exitcode
        raise StartFailed(launch.role, code if code is not None and code > 0 else 1) from None
    finally:
        launch.reader.close()


async def _readable(fd: int) -> None:
    """Wait until ``fd`` is readable (for a process sentinel: until the process exited)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> T | None:
    """The result of ``work``, or None if ``stop`` is set first (``work`` is cancelled)."""
    task = asyncio.create_task(work)
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()
