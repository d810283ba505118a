"""Running blocking SQLite work off the event loop, on one thread that owns the connection."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from tikk.errors import BackendUnavailable

T = TypeVar("T")


class SqliteRunner:
    """One connection, used only from one worker thread: SQLite objects must not cross threads.

    WAL mode lets other processes (a separate dispatcher, the CLI) read while this one writes;
    ``busy_timeout`` makes concurrent writers wait rather than fail.
    """

    def __init__(
        self,
        path: str,
        schema: str,
        added_columns: Mapping[str, Mapping[str, str]] | None = None,
        *,
        cache_mib: int = 0,
    ) -> None:
        self._path = path
        self._schema = schema
        self._added = added_columns or {}
        self._cache_mib = cache_mib
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    async def start(self) -> None:
        """Open the file (creating its folder, tables and missing columns); idempotent."""
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._open)
        except (sqlite3.Error, OSError) as exc:
            raise BackendUnavailable(f"sqlite: cannot open {self._path!r}: {exc}") from exc

    def _open(self) -> None:
        path = self._path
        if path != ":memory:":
            create_private(Path(path))
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        for pragma in PRAGMAS:
            conn.execute(pragma)
        if self._cache_mib:
            conn.execute(f"PRAGMA cache_size=-{self._cache_mib * 1024}")
        conn.executescript(self._schema)
        _add_missing_columns(conn, self._added)
        self._conn = conn

    async def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work(conn)`` on the SQLite thread; driver errors become ``BackendUnavailable``."""
        if self._executor is None:
            raise BackendUnavailable(f"sqlite: {self._path!r} is not open (start() first)")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, work)

    async def ping(self) -> None:
        """A query that reads no table, on the connection's thread: ``BackendUnavailable``
        if the file is not open or its thread does not get to it."""
        await self.run(lambda conn: conn.execute("SELECT 1").fetchone())

    def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None:
            raise BackendUnavailable("sqlite store is closed")
        try:
            return work(self._conn)
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"sqlite: {exc}") from exc

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(executor, self._close)
        executor.shutdown(wait=True)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def create_private(path: Path) -> None:
    """Create ``path``'s folder (0700) and the file itself (0600), each only if missing: they
    hold tenant data (payloads, delivery tokens, credential hashes). SQLite creates a
    database's -wal and -shm files with the database file's mode, so they follow. An existing
    file or folder keeps its mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def _add_missing_columns(conn: sqlite3.Connection, added: Mapping[str, Mapping[str, str]]) -> None:
    """Bring a file created by an older release up to the current columns (``CREATE TABLE IF
    NOT EXISTS`` leaves an existing table as it was). Names come from our constants only."""
    for table, columns in added.items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns.items():
            if name not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")


# Every connection's settings. NORMAL in WAL mode survives a process crash (kill -9); only an
# OS crash can lose the last transactions. A larger WAL between checkpoints makes a bulk load
# write each page fewer times.
PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=30000",
    "PRAGMA wal_autocheckpoint=10000",
)


class Transaction:
    """``with Transaction(conn):`` — BEGIN IMMEDIATE … COMMIT, ROLLBACK on error."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
