"""The embedded queue's doorbell: how a worker learns at once that the dispatcher put messages
in the queue file, instead of finding out on its next poll.

Each listening consumer binds a Unix datagram socket in the folder beside the queue file
(``<queue file>.bells/``, private like the file). After each committed publish the producer
sends one byte to every socket there. A ring is a hint, never a message: the consumer still
fetches from the file, which stays the one source of truth, so a lost ring costs only the
consumer's fallback poll, and a ring that finds nothing costs one empty fetch. A socket whose
process died refuses the datagram and is removed by the next ring.

Sends never block: a listener whose buffer is full has rings pending already. Where a socket
cannot be made (a path longer than the platform allows, no Unix sockets), ``Doorbell.open``
says so and the consumer polls as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

# sockaddr_un's path holds 108 bytes on Linux and 104 on macOS and the BSDs, its last a NUL.
_MAX_SOCKET_PATH = 103
_SUFFIX = ".sock"
# A folder's mtime moves in coarse steps on some file systems, so a bell bound in the same step
# as the last listing would go unseen: list again at least this often.
_RELIST_S = 1.0


def bells_folder(queue_path: str) -> Path:
    """The folder of the doorbell sockets of the queue file at ``queue_path``."""
    return Path(queue_path + ".bells")


class Doorbell:
    """A consumer's end: ``open`` binds a socket and calls ``wake`` (on the running loop) each
    time one or more rings arrive. ``close`` unbinds it. Not thread-safe; one loop."""

    def __init__(self, queue_path: str) -> None:
        self._folder = bells_folder(queue_path)
        self._sock: socket.socket | None = None
        self._path: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self, wake: Callable[[], None]) -> bool:
        """Listen for rings; False (and nothing bound) where this queue cannot have a
        doorbell, e.g. a socket path that would be too long."""
        if self._sock is not None:
            return True
        if self._folder.name == ":memory:.bells":
            return False  # an in-memory queue has no file, and no other process to ring
        path = self._folder / f"{os.getpid()}-{uuid.uuid4().hex[:12]}{_SUFFIX}"
        if not hasattr(socket, "AF_UNIX") or len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            return False
        try:
            self._folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.bind(str(path))
        except OSError:
            return False
        self._sock, self._path, self._loop = sock, path, asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._rang, sock, wake)
        return True

    @staticmethod
    def _rang(sock: socket.socket, wake: Callable[[], None]) -> None:
        # Take every pending ring: one wake-up covers them all.
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while sock.recv(64):
                pass
        wake()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(sock.fileno())
        sock.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)


class DoorbellRinger:
    """The producer's end: ``ring`` tells every listening consumer that messages wait. The
    folder is listed again when it changed (a consumer came or went) or once ``_RELIST_S`` has
    passed on ``monotonic``."""

    def __init__(self, queue_path: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._folder = bells_folder(queue_path)
        self._monotonic = monotonic
        self._sock: socket.socket | None = None
        self._listed: tuple[int, float] | None = None  # (folder mtime, when)
        self._bells: list[str] = []

    def ring(self) -> int:
        """Ring every bell; how many were rung. Never raises: a doorbell only hurries."""
        try:
            self._refresh()
        except OSError:
            return 0
        if not self._bells:
            return 0
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        return sum(self._ring_one(bell) for bell in list(self._bells))

    def _refresh(self) -> None:
        now = self._monotonic()
        try:
            changed_at = os.stat(self._folder).st_mtime_ns
        except FileNotFoundError:
            self._bells, self._listed = [], None
            return
        if (
            self._listed is None
            or self._listed[0] != changed_at
            or now - self._listed[1] > _RELIST_S
        ):
            self._listed = (changed_at, now)
            self._bells = [str(p) for p in self._folder.iterdir() if p.name.endswith(_SUFFIX)]

    def _ring_one(self, bell: str) -> bool:
        assert self._sock is not None
        try:
            self._sock.sendto(b"\x01", bell)
        except (BlockingIOError, InterruptedError):
            return True  # its buffer is full of rings it has not read yet
        except (ConnectionRefusedError, FileNotFoundError):
            # Nobody listens there any more (its process died): take the bell down.
            with contextlib.suppress(OSError):
                os.unlink(bell)
            self._bells.remove(bell)
            return False
        except OSError:
            return False
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
