"""The owner lock of an embedded store: one process at a time dispatches from a directory of
SQLite files.

A dispatcher that owns every shard (``dispatcher.ownership.SingleOwner``) fences the one
started before it by its epoch, and the fence holds for good: two such processes on one store
take its shards from each other, and the older never gets them back even once the newer has
exited. So the process that would own the store first takes an exclusive ``flock`` on
``owner.lock`` in its directory and writes its pid there, which the refusal of the next one
names. The kernel drops a ``flock`` when the process that holds it ends, however it ends
(``kill -9`` included), so a dead owner never blocks a restart; the pid it left in the file
counts for nothing until another process holds the lock again and writes its own.

A ``flock`` belongs to the open file, not the process: a second ``take`` in the same process
is refused too, and a child started by ``fork`` would keep the lock (tikk spawns its children;
the descriptor is not inherited through ``exec``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path
from types import TracebackType

from tikk.errors import BackendUnavailable, FailedPrecondition

log = logging.getLogger("tikk.store")

LOCK_FILE = "owner.lock"


class OwnerLock:
    """The lock of one store directory, held by this process from ``take`` until ``release``
    (or the end of the ``with`` block, or of the process)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def take(cls, directory: Path) -> OwnerLock:
        """Lock ``directory`` (created 0700 if missing) for this process, or raise
        ``FailedPrecondition`` naming the pid of the process that holds it;
        ``BackendUnavailable`` when the directory or its lock file cannot be written."""
        path = directory / LOCK_FILE
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise BackendUnavailable(f"cannot lock {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise FailedPrecondition(
                f"{directory} is owned by pid {holder}, which holds {path}: one process at a "
                "time dispatches from an embedded store; stop it or use another data directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _warn_if_shared(directory)
        return cls(path, fd)

    def release(self) -> None:
        """Give the lock up (idempotent). The file stays: removing it would let a process
        that opened it just before lock a file no longer in the directory."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> OwnerLock:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _holder(fd: int) -> str:
    """The pid written in the lock file by its holder ("unknown" while it is being written)."""
    with contextlib.suppress(OSError, ValueError):
        return str(int(os.pread(fd, 32, 0).decode()))
    return "unknown"


def _warn_if_shared(directory: Path) -> None:
    """The directory holds tenant data (payloads, tokens, credential hashes): say so when
    others may read it (one made by an older release, or by hand)."""
    mode = directory.stat().st_mode & 0o777
    if mode & 0o077:
        log.warning(
            "%s is open to other users (mode %03o): its files hold tenant data; chmod 700 it",
            directory, mode,
        )  # fmt: skip
