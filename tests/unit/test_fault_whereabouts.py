"""The fault suite's account of where a lost task's rows are (``devtools.faults.whereabouts``),
on the embedded store: it must tell a due row from a parked one, and a missing task."""

from __future__ import annotations

import asyncio
from pathlib import Path

from devtools.faults.whereabouts import locate
from tests.factories import make_task
from tikk.store.sqlite.queue_holds import SqliteQueueHoldStore
from tikk.store.sqlite.tasks import SqliteTaskStore

SHARDS = 4


async def _write(path: Path) -> None:
    store = SqliteTaskStore(str(path), SHARDS)
    holds = SqliteQueueHoldStore(str(path))
    await store.start()
    await holds.start()
    try:
        waiting, parked = make_task("waiting"), make_task("parked")
        await store.create_many([waiting, parked])
        await holds.park([parked.entry()])
    finally:
        await holds.close()
        await store.close()


def test_each_lost_task_is_found_in_its_due_row_its_parked_row_or_nowhere(tmp_path: Path) -> None:
    path = tmp_path / "tikk.db"
    asyncio.run(_write(path))
    lines = locate(f"sqlite://{path}", SHARDS, "default", ["waiting", "parked", "never"])
    waiting, parked, never = lines
    assert waiting.startswith("waiting: SCHEDULED at attempt 1")
    assert "due row: attempt 1 due" in waiting and waiting.endswith("parked: no")
    assert "due row: attempt 1 due" in parked and "parked: attempt 1 due" in parked
    assert never == "never: no task row"
