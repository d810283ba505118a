"""Bytes on disk of a store, for the benchmark's bytes per stored task.

SQLite: the database file and its write-ahead log. Cassandra: the keyspace's folder under the
node's data directory, after its memtables were flushed. Without JMX (the local stack runs
none, so no nodetool) a flush is asked for through CQL: setting a table's
``memtable_flush_period_in_ms`` flushes it; the setting is put back afterwards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SETTLE_S = 3.0
_FLUSH_TIMEOUT_S = 120.0
_SETTLED_SHARE = 0.02


@dataclass(frozen=True)
class DiskUse:
    bytes: int | None
    source: str
    flushed: bool


def folder_bytes(path: Path) -> int:
    """Sizes of every regular file below ``path`` (0 if it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def sqlite_bytes(db: Path) -> DiskUse:
    """The file, its WAL and shared-memory index: all the store keeps on disk."""
    files = [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]
    return DiskUse(sum(f.stat().st_size for f in files if f.exists()), str(db.name), True)


def cassandra_bytes(keyspace: str, data_root: Path, host: str, port: int) -> DiskUse:
    """The keyspace's SSTables once flushed; ``bytes`` None if the data folder is not here
    (a node on another machine, or a stack started from another checkout)."""
    folder = data_root / keyspace
    if not folder.exists():
        return DiskUse(None, "keyspace folder not found (see --cassandra-data)", False)
    flushed = _flush(keyspace, folder, host, port)
    return DiskUse(folder_bytes(folder), f"{keyspace} data folder", flushed)


def _flush(keyspace: str, folder: Path, host: str, port: int) -> bool:
    """Ask every table of the keyspace to flush; True once the folder's size held still."""
    from devtools.stack import login
    from tikk.drivers.cassandra import CassandraConfig, CassandraSession

    # The stack's login (if authenticated) comes with its URL.
    db = CassandraSession(CassandraConfig.from_url(login(f"cassandra://{host}:{port}/{keyspace}")))
    db.connect()
    try:
        tables = [r.table_name for r in db.session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,)
        )]  # fmt: skip
        _set_flush_period(db, keyspace, tables, 1_000)
        settled = _wait_settled(folder)
        _set_flush_period(db, keyspace, tables, 0)
    finally:
        db.shutdown()
    return settled


def _set_flush_period(db: Any, keyspace: str, tables: list[str], period_ms: int) -> None:
    for table in tables:
        db.session.execute(
            f"ALTER TABLE {keyspace}.{table} WITH memtable_flush_period_in_ms = {period_ms}"
        )


def _wait_settled(folder: Path) -> bool:
    """Wait until the folder's size stays within ``_SETTLED_SHARE`` of one value for
    ``_SETTLE_S``. (Exactly the same is too strict: with a flush period set, a node keeps
    writing small files for system tables and compactions, and a small keyspace never
    holds still.)"""
    deadline = time.monotonic() + _FLUSH_TIMEOUT_S
    last, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = folder_bytes(folder)
        if abs(size - last) > _SETTLED_SHARE * max(last, 1):
            last, still_since = size, time.monotonic()
        elif size and time.monotonic() - still_since >= _SETTLE_S:
            return True
        time.sleep(0.5)
    return False
