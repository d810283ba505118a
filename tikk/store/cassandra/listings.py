"""The Cassandra task store's listings: a queue's tasks (``tasks_by_queue``, one partition per
namespace, queue and shard) and a namespace's dead letters (``dead_letters``, one partition per
namespace and day). A listing row only points at a task: each is checked against the task row
it names, so a stale one (the task moved on, or expired) is skipped, never shown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tikk.drivers.cassandra import CassandraSession
from tikk.model import Page, Task, TaskState
from tikk.paging import decode_token, encode_token
from tikk.settings import DAY_MS
from tikk.store.cassandra.schema import TASK_RETENTION_S
from tikk.store.cassandra.task_rows import read_tasks

SELECT_TASKS_BY_QUEUE = (
    "SELECT task_id FROM tasks_by_queue WHERE namespace = ? AND queue = ? AND shard = ?"
    " AND task_id > ? LIMIT ?"
)
SELECT_TASKS_BY_LABEL = (
    "SELECT task_id FROM tasks_by_label WHERE namespace = ? AND label = ? AND shard = ?"
    " AND task_id > ? LIMIT ?"
)
DELETE_LABEL_LISTED = (
    "DELETE FROM tasks_by_label WHERE namespace = ? AND label = ? AND shard = ? AND task_id = ?"
)
INSERT_DEAD = (
    "INSERT INTO dead_letters (namespace, day, updated_ms, task_id, queue) VALUES (?, ?, ?, ?, ?)"
    " USING TTL ?"
)
DELETE_DEAD = (
    "DELETE FROM dead_letters WHERE namespace = ? AND day = ? AND updated_ms = ? AND task_id = ?"
)
SELECT_DEAD = (
    "SELECT updated_ms, task_id, queue FROM dead_letters WHERE namespace = ? AND day = ?"
    " AND (updated_ms, task_id) < (?, ?) LIMIT ?"
)


DELETE_QUEUE_LISTED = (
    "DELETE FROM tasks_by_queue WHERE namespace = ? AND queue = ? AND shard = ? AND task_id = ?"
)


def dead_letter_write(t: Task, retention_s: int = TASK_RETENTION_S) -> tuple[str, list[Any]]:
    """The statement and values that list the dead-lettered task ``t``."""
    day = t.updated_ms // DAY_MS
    return INSERT_DEAD, [t.namespace, day, t.updated_ms, t.task_id, t.queue, retention_s]


def queue_listing_delete(t: Task) -> tuple[str, list[Any]]:
    """The statement and values that take the task ``t`` off its queue's listing."""
    return DELETE_QUEUE_LISTED, [t.namespace, t.queue, t.shard, t.task_id]


def label_listing_deletes(t: Task) -> list[tuple[str, list[Any]]]:
    """The statements and values that take the task ``t`` off its labels' listings."""
    return [
        (DELETE_LABEL_LISTED, [t.namespace, f"{k}={v}", t.shard, t.task_id])
        for k, v in t.labels.items()
    ]


def dead_letter_delete(t: Task) -> tuple[str, list[Any]]:
    """The statement and values that take the dead-lettered task ``t`` off the listing."""
    return DELETE_DEAD, [t.namespace, t.updated_ms // DAY_MS, t.updated_ms, t.task_id]


async def list_queue_tasks(
    db: CassandraSession,
    shard_count: int,
    namespace: str,
    queue: str,
    *,
    state: TaskState | None,
    page_size: int,
    page_token: str,
) -> Page[Task]:
    """``TaskStore.list_tasks``: the queue's listing shard by shard, by task id."""
    listing = _ShardedListing(SELECT_TASKS_BY_QUEUE, [namespace, queue], shard_count)
    return await listing.page(db, namespace, state, page_size, page_token)


async def list_label_tasks(
    db: CassandraSession,
    shard_count: int,
    namespace: str,
    label: tuple[str, str],
    *,
    page_size: int,
    page_token: str,
) -> Page[Task]:
    """``TaskStore.list_by_label``: the label's listing shard by shard, by task id."""
    listing = _ShardedListing(SELECT_TASKS_BY_LABEL, [namespace, "=".join(label)], shard_count)
    return await listing.page(db, namespace, None, page_size, page_token)


async def count_label_tasks(
    db: CassandraSession, shard_count: int, namespace: str, label: tuple[str, str], *,
    state: TaskState | None, most: int,
) -> tuple[int, bool]:  # fmt: skip
    """``TaskStore.count_by_label``: no count in the database, so the listing's pages, each
    task read for its state."""
    counted, token = 0, ""
    while counted <= most:
        page = await list_label_tasks(
            db, shard_count, namespace, label, page_size=1_000, page_token=token
        )
        counted += sum(state is None or t.state is state for t in page.items)
        token = page.next_token
        if not token:
            return min(counted, most), counted <= most
    return most, False


@dataclass(frozen=True)
class _ShardedListing:
    """A listing table of one partition per shard under ``key`` (bound before the shard)."""

    select: str
    key: list[Any]
    shard_count: int

    async def page(
        self, db: CassandraSession, namespace: str, state: TaskState | None, page_size: int,
        page_token: str,
    ) -> Page[Task]:  # fmt: skip
        after = decode_token(page_token, (int, str))
        shard, last = (int(after[0]), str(after[1])) if after else (0, "")
        found: list[Task] = []
        while shard < self.shard_count and len(found) < page_size:
            rows = await db.execute(self.select, [*self.key, shard, last, page_size])
            ids = [r.task_id for r in rows]
            for tid, task in zip(ids, await read_tasks(db, namespace, ids), strict=True):
                last = tid
                if task is not None and (state is None or task.state is state):
                    found.append(task)
                if len(found) == page_size:
                    break
            if len(found) < page_size and len(rows) < page_size:
                shard, last = shard + 1, ""  # this shard's listing is exhausted
        more = shard < self.shard_count
        return Page(found, encode_token(shard, last) if more else "")


async def list_dead_tasks(
    db: CassandraSession,
    namespace: str,
    queue: str,
    *,
    page_size: int,
    page_token: str,
    now_ms: int,
) -> Page[Task]:
    """``TaskStore.list_dead_letters``: day by day from today back to the retention."""
    after = decode_token(page_token, (int, int, str))
    day, before_ms, before_id = (
        (int(after[0]), int(after[1]), str(after[2])) if after else (now_ms // DAY_MS, 2**62, "")
    )
    oldest = now_ms // DAY_MS - TASK_RETENTION_S * 1000 // DAY_MS
    found: list[Task] = []
    while day >= oldest and len(found) < page_size:
        params = [namespace, day, before_ms, before_id, page_size]
        rows = await db.execute(SELECT_DEAD, params)
        tasks = await read_tasks(db, namespace, [r.task_id for r in rows])
        for row, task in zip(rows, tasks, strict=True):
            before_ms, before_id = row.updated_ms, row.task_id
            if task is not None and _still_dead(task, row.updated_ms, queue):
                found.append(task)
            if len(found) == page_size:
                break
        if len(rows) < page_size and len(found) < page_size:
            day, before_ms, before_id = day - 1, 2**62, ""
    more = len(found) == page_size
    return Page(found, encode_token(day, before_ms, before_id) if more else "")


def _still_dead(task: Task, listed_ms: int, queue: str) -> bool:
    """A dead-letter row is current if the task is still dead-lettered by that transition."""
    return (
        task.state is TaskState.DEAD_LETTERED
        and task.updated_ms == listed_ms
        and (not queue or task.queue == queue)
    )
