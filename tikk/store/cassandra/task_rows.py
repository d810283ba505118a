"""How the Cassandra task store lays out a task: the values it writes, the task and due entry
it reads back, the TTL of each row, and the statements more than one part of the store runs
(``tikk.store.cassandra.tasks`` and the modules beside it; the schedule store writes due rows
with them too)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tikk.buckets import minute_of_second, minutes_between
from tikk.drivers.cassandra import MAX_TTL_S, CassandraSession
from tikk.errors import NotFound
from tikk.model import DueEntry, RetryPolicy, Task, TaskState
from tikk.store.cassandra.schema import DUE_RETENTION_S, TASK_RETENTION_S
from tikk.store.tasks import DUE_READ_COLUMNS, DUE_WRITE_COLUMNS, TASK_COLUMNS

# ``row_ttl``: what is left of the TTL of a cell only whole-row writes set (``queue``), so a
# write of a few cells can end them with the row, whatever retention it was written with.
SELECT_TASK = (
    f"SELECT {', '.join(TASK_COLUMNS)}, create_pending, create_done,"
    " WRITETIME(state) AS state_written, TTL(queue) AS row_ttl FROM tasks"
    " WHERE namespace = ? AND task_id = ?"
)
# Whole tasks, a few of a namespace per request (``read_tasks``: listings read pages of them).
SELECT_TASKS = SELECT_TASK.replace("AND task_id = ?", "AND task_id IN ?")
# Where a task stands, for a few tasks of a namespace per request (on this driver a request's
# own cost is most of what a small read costs): what claims and successes decide on.
SELECT_STATES = (
    "SELECT task_id, state, attempt, due_ms, create_pending, create_done, succeeded_by,"
    " WRITETIME(state) AS state_written, TTL(queue) AS row_ttl FROM tasks"
    " WHERE namespace = ? AND task_id IN ?"
)
# With the row's position: a husk (``read_due_rows``) has nothing else to continue a page from.
SELECT_DUE = (
    f"SELECT second, task_key, {', '.join(DUE_READ_COLUMNS)} FROM due_index"
    " WHERE shard = ? AND minute = ?"
    " AND (second, task_key) > (?, ?) AND (second, task_key) < (?, ?) LIMIT ?"
)
_IDS_PER_READ = 16
INSERT_DUE = (
    f"INSERT INTO due_index ({', '.join(DUE_WRITE_COLUMNS)})"
    f" VALUES ({', '.join('?' * len(DUE_WRITE_COLUMNS))}) USING TTL ?"
)
INSERT_TASK_BY_QUEUE = (
    "INSERT INTO tasks_by_queue (namespace, queue, shard, task_id) VALUES (?, ?, ?, ?) USING TTL ?"
)
INSERT_TASK_BY_LABEL = (
    "INSERT INTO tasks_by_label (namespace, label, shard, task_id) VALUES (?, ?, ?, ?) USING TTL ?"
)


def ttl_after(due_ms: int, now_ms: int, retention_s: int) -> int:
    """The TTL of a row written at ``now_ms`` that must live ``retention_s`` past ``due_ms``."""
    return max(1, min(MAX_TTL_S, (max(due_ms - now_ms, 0) // 1000) + retention_s))


def ttl_with_row(due_ms: int, now_ms: int, retention_s: int = TASK_RETENTION_S) -> int:
    """The TTL that ends a cell written now no later than the task row written for
    ``due_ms`` (a late run must not leave cells alive after the row's others expired)."""
    return max(1, min(MAX_TTL_S, (due_ms - now_ms) // 1000 + retention_s))


def cells_ttl(read: Any, due_ms: int, now_ms: int) -> int:
    """The TTL of a few cells written over the task row ``read`` (``SELECT_TASK`` or
    ``SELECT_STATES``): what is left of the row's own, so they end with it."""
    return int(read.row_ttl) if read.row_ttl else ttl_with_row(due_ms, now_ms)


def task_ttl(t: Task, retention_s: int = TASK_RETENTION_S) -> int:
    """The TTL of a new task's rows: its retention after the due time."""
    return ttl_after(t.due_ms, t.created_ms, retention_s)


def task_values(t: Task) -> list[Any]:
    r = t.retry
    return [
        t.namespace, t.task_id, t.queue, t.handler, t.payload, dict(t.labels), r.max_attempts,
        r.initial_backoff_ms, r.multiplier, r.max_backoff_ms, r.jitter, int(t.state), t.attempt,
        t.due_ms, t.scheduled_ms, t.created_ms, t.updated_ms, t.shard, t.fingerprint,
        t.last_error_type, t.last_error_message, dict(t.trace_context), t.schedule_id,
        t.start_timeout_ms, t.execution_timeout_ms,
    ]  # fmt: skip


def task_from_cql_row(row: Any) -> Task:
    return Task(
        namespace=row.namespace, task_id=row.task_id, queue=row.queue, handler=row.handler,
        payload=bytes(row.payload or b""), labels=dict(row.labels or {}),
        retry=RetryPolicy(row.max_attempts, row.initial_backoff_ms, row.multiplier,
                          row.max_backoff_ms, row.jitter),
        state=TaskState(row.state), attempt=row.attempt, due_ms=row.due_ms,
        scheduled_ms=row.scheduled_ms, created_ms=row.created_ms, updated_ms=row.updated_ms,
        shard=row.shard, fingerprint=row.fingerprint, last_error_type=row.last_error_type or "",
        last_error_message=row.last_error_message or "",
        trace_context=dict(row.trace_context or {}), schedule_id=row.schedule_id or "",
        start_timeout_ms=row.start_timeout_ms or 0,
        execution_timeout_ms=row.execution_timeout_ms or 0,
    )  # fmt: skip


def _handed_off(row: Any) -> bool:
    """Whether a due-index row was handed off: marked for its own due time. A row read without
    the column (a parked row) never was."""
    return bool(getattr(row, "handed_off_ms", None) == row.due_ms)


def entry_from_cql_row(row: Any) -> DueEntry:
    return DueEntry(
        shard=row.shard, due_ms=row.due_ms, namespace=row.namespace, task_id=row.task_id,
        attempt=row.attempt, queue=row.queue, handler=row.handler,
        payload=bytes(row.payload or b""), labels=dict(row.labels or {}),
        max_attempts=row.max_attempts, scheduled_ms=row.scheduled_ms,
        trace_context=dict(row.trace_context or {}), schedule_id=row.schedule_id or "",
        start_timeout_ms=row.start_timeout_ms or 0,
        execution_timeout_ms=row.execution_timeout_ms or 0,
        handed_off=_handed_off(row),
    )  # fmt: skip


def due_values(e: DueEntry, now_ms: int) -> list[Any]:
    return [
        minute_of_second(e.second), e.second, e.key, e.shard, e.due_ms, e.namespace, e.task_id,
        e.attempt, e.queue, e.handler, e.payload, dict(e.labels), e.max_attempts,
        e.scheduled_ms, dict(e.trace_context), e.schedule_id, e.start_timeout_ms,
        e.execution_timeout_ms, ttl_after(e.due_ms, now_ms, DUE_RETENTION_S),
    ]  # fmt: skip


def listing_write(t: Task, ttl: int) -> tuple[str, list[Any]]:
    """The statement and values of the task's row in its queue's listing."""
    return INSERT_TASK_BY_QUEUE, [t.namespace, t.queue, t.shard, t.task_id, ttl]


def label_writes(t: Task, ttl: int) -> list[tuple[str, list[Any]]]:
    """The statements and values of the task's rows in its labels' listings."""
    return [
        (INSERT_TASK_BY_LABEL, [t.namespace, f"{k}={v}", t.shard, t.task_id, ttl])
        for k, v in t.labels.items()
    ]


def half_written(row: Any) -> bool:
    """A task row whose create never finished its second write (see
    ``tikk.store.cassandra.task_creates.CREATE_TASK``)."""
    return bool(row.create_pending) and not row.create_done


async def read_task(db: CassandraSession, namespace: str, task_id: str) -> Task:
    """The task; ``NotFound`` if there is none, or only a half-written one."""
    return task_from_cql_row(await read_task_row(db, namespace, task_id))


async def read_task_row(db: CassandraSession, namespace: str, task_id: str) -> Any:
    """The task's row as ``SELECT_TASK`` reads it; ``NotFound`` as ``read_task``."""
    rows = await db.execute(SELECT_TASK, [namespace, task_id])
    if not rows or not _whole(rows[0]):
        raise NotFound(f"task {task_id!r} not found in namespace {namespace!r}")
    return rows[0]


def _whole(row: Any) -> bool:
    """Whether a task row stands for a task. A row whose state expired (its last cells outlive
    the others by under a second) is gone too, and so is one whose whole-row cells expired
    first (a few cells written with a longer retention than the row's, until they expire)."""
    return not half_written(row) and row.state is not None and row.queue is not None


async def read_tasks(db: CassandraSession, namespace: str, ids: Sequence[str]) -> list[Task | None]:
    """The tasks of ``ids``, a few per request and the requests concurrently (a request's
    own cost is most of a small read's here); None for each one not found."""
    rows = await _rows_by_id(db, SELECT_TASKS, {namespace: ids})
    return [
        task_from_cql_row(row) if (row := rows.get((namespace, t))) and _whole(row) else None
        for t in ids
    ]


async def read_states(
    db: CassandraSession, entries: Sequence[DueEntry]
) -> dict[tuple[str, str], Any]:
    """The state columns of each entry's task row, by (namespace, task id), read for a few
    tasks of a namespace per request."""
    ids: dict[str, list[str]] = defaultdict(list)
    for e in entries:
        ids[e.namespace].append(e.task_id)
    return await _rows_by_id(db, SELECT_STATES, ids)


async def _rows_by_id(
    db: CassandraSession, statement: str, ids: Mapping[str, Sequence[str]]
) -> dict[tuple[str, str], Any]:
    """The rows ``statement`` (``... WHERE namespace = ? AND task_id IN ?``) reads for the
    ids of each namespace, each id once and ``_IDS_PER_READ`` to a request; by (namespace,
    task id)."""
    reads = [
        (namespace, db.bind(statement, [namespace, unique[i : i + _IDS_PER_READ]]))
        for namespace, some in ids.items()
        for unique in [list(dict.fromkeys(some))]
        for i in range(0, len(unique), _IDS_PER_READ)
    ]
    found = await db.execute_many([bound for _, bound in reads])
    return {
        (namespace, row.task_id): row
        for (namespace, _), rows in zip(reads, found, strict=True)
        for row in rows
    }


async def read_due_rows(
    db: CassandraSession,
    shard: int,
    after: tuple[int, str],
    until_second: int,
    limit: int,
    *,
    unsent_only: bool = False,
) -> list[DueEntry]:
    """``TaskStore.read_due``: the minute buckets of the range in turn. Rows left out
    (``unsent_only``) are read and skipped here: filtering on a regular column in Cassandra
    would read them all the same."""
    out: list[DueEntry] = []
    for minute in minutes_between(after[0], until_second):
        position = after
        while len(out) < limit:
            want = limit - len(out)
            bounds = [*position, until_second + 1, ""]
            rows = await db.execute(SELECT_DUE, [shard, minute, *bounds, want])
            # A husk (a hand-off mark written after its row was moved or cancelled) has no
            # due time: no row to fire. It, like a row ``unsent_only`` leaves out, still took
            # a place under the limit, so a full answer means more may follow in this minute:
            # the caller takes fewer rows than its limit for the end of the range, and must
            # not get them here.
            out += [
                entry_from_cql_row(r)
                for r in rows
                if r.due_ms is not None and not (unsent_only and _handed_off(r))
            ]
            if len(rows) < want:
                break
            position = (rows[-1].second, rows[-1].task_key)
        if len(out) >= limit:
            break
    return out
