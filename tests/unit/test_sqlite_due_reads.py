"""A due read of the embedded store costs what it returns, not what its minute holds: it
seeks to its position instead of scanning its minute bucket from the start. Counted in SQLite
virtual-machine steps (a progress handler), so the test measures work, not time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.factories import T0, make_task
from tikk.buckets import second_of
from tikk.store.sqlite.tasks import SqliteTaskStore

MINUTE = T0 + 40_000  # the start of a minute (T0 is 20 s past one)
LAST = MINUTE + 59_000  # the minute's last second: the read's


async def _steps_to_read_the_last_second(path: Path, earlier_rows: int) -> tuple[int, int]:
    """(VM steps, rows returned) reading the last second of a minute that holds
    ``earlier_rows`` rows before it and ten in it, all in one shard."""
    earlier = [
        make_task(f"e{i}", due_ms=MINUTE + i * 58_000 // max(earlier_rows, 1), shard_count=1)
        for i in range(earlier_rows)
    ]
    last = [make_task(f"l{i}", due_ms=LAST + i, shard_count=1) for i in range(10)]
    store = SqliteTaskStore(str(path), 1)
    await store.start()
    try:
        await store.create_many(earlier + last)
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0  # go on

        def watch(conn: sqlite3.Connection) -> None:
            conn.set_progress_handler(count, 1)

        await store._db.run(watch)  # the store's own connection, on its thread
        rows = await store.read_due(0, (second_of(LAST) - 1, "~"), second_of(LAST), 100)
        return steps[0], len(rows)
    finally:
        await store.close()


async def test_a_due_read_costs_what_it_returns_not_what_its_minute_holds(
    tmp_path: Path,
) -> None:
    small, small_rows = await _steps_to_read_the_last_second(tmp_path / "small.db", 10)
    big, big_rows = await _steps_to_read_the_last_second(tmp_path / "big.db", 5_000)
    assert small_rows == big_rows == 10
    # Scanning the minute from its start took over a hundred times the steps here.
    assert big <= 2 * small, (small, big)
