"""Where a lost task's rows are, read straight from the run's store before its data is dropped.

A loss names the step that dropped the task: no due row at all (a create or retry that never
wrote it), a row its shard's cursor already passed (read and settled without firing, or
written behind the cursor), a row still ahead of the cursor (its dispatcher stuck or gone), a
row marked handed off that no worker started, or a row parked in its queue's listing and
never released. The report carries one line per lost task (``Run.locate_lost``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from server.wiring import QUEUE_HOLD_STORES, TASK_STORES, Drivers, build, started
from tikk.buckets import second_of
from tikk.errors import NotFound
from tikk.model import Cursor, Task
from tikk.store.queue_holds import QueueHoldStore
from tikk.store.tasks import TaskStore

# Lost tasks located at most (the rest are only counted in the report).
MOST = 12
# After every key of a second: a read from (second - 1, _LAST) starts at that second.
_LAST = "\U0010ffff"


def locate(store_url: str, shards: int, namespace: str, task_ids: Sequence[str]) -> list[str]:
    """One line per task of ``task_ids`` (the first ``MOST``) saying where its rows are."""
    return asyncio.run(_locate(store_url, shards, namespace, task_ids[:MOST]))


async def _locate(url: str, shards: int, namespace: str, task_ids: Sequence[str]) -> list[str]:
    drivers = Drivers()
    store = await started(build(TASK_STORES, "store_url", url, shards, drivers))
    try:
        holds = await started(build(QUEUE_HOLD_STORES, "store_url", url, shards, drivers))
        try:
            cursors = await store.get_cursors()
            return [await _where(store, holds, cursors, namespace, t) for t in task_ids]
        finally:
            await holds.close()
    finally:
        await store.close()


async def _where(
    store: TaskStore,
    holds: QueueHoldStore,
    cursors: dict[int, Cursor],
    namespace: str,
    task_id: str,
) -> str:
    try:
        task = await store.get(namespace, task_id)
    except NotFound:
        return f"{task_id}: no task row"
    second = second_of(task.due_ms)
    cursor = cursors.get(task.shard)
    behind = "no cursor" if cursor is None else f"cursor {cursor.second - second:+d} s from it"
    head = (
        f"{task_id}: {task.state.name} at attempt {task.attempt}, due {task.due_ms} "
        f"(updated {task.updated_ms}), shard {task.shard} ({behind})"
    )
    return f"{head}; due row: {await _due_row(store, task)}; parked: {await _parked(holds, task)}"


async def _due_row(store: TaskStore, task: Task) -> str:
    second = second_of(task.due_ms)
    rows = await store.read_due(task.shard, (second - 1, _LAST), second, 10_000)
    mine = [r for r in rows if r.task_id == task.task_id and r.namespace == task.namespace]
    if not mine:
        return "none in its second"
    return ", ".join(
        f"attempt {r.attempt} due {r.due_ms}{' handed off' if r.handed_off else ''}" for r in mine
    )


async def _parked(holds: QueueHoldStore, task: Task) -> str:
    rows = await holds.read_parked(task.queue, task.shard, (task.due_ms - 1, _LAST), 10_000)
    mine = [r for r in rows if r.task_id == task.task_id and r.namespace == task.namespace]
    return ", ".join(f"attempt {r.attempt} due {r.due_ms}" for r in mine) or "no"
