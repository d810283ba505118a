"""Quota store on Cassandra; semantics in ``tikk.store.quotas``.

Tables (``tikk.store.cassandra.schema`` v8): ``namespace_quotas`` by namespace, and the counter
table ``task_usage`` that the task store moves (``count_usage``) after it wrote the task rows
a change concerns: through the session's counter tally, one counter update per namespace
about twice a second, however many tasks were written. Counter updates are not idempotent and
not atomic with the task rows, so the count can drift by what a crash interrupts (see
``tikk.store.quotas``); ``recount`` corrects it from a read of the task table by token ranges
(rows whose retention ran out are gone from it, too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from tikk.drivers.cassandra import CassandraSession
from tikk.model import TaskState
from tikk.quotas import QUOTA_NAMES, NamespaceQuotas, NamespaceUsage
from tikk.store.quotas import OpenCount

_COLUMNS = ", ".join(QUOTA_NAMES)
SELECT_QUOTAS = f"SELECT {_COLUMNS} FROM namespace_quotas WHERE namespace = ?"
INSERT_QUOTAS = (
    f"INSERT INTO namespace_quotas (namespace, {_COLUMNS}, updated_ms)"
    f" VALUES (?, {', '.join('?' * len(QUOTA_NAMES))}, ?)"
)
ADD_USAGE = "UPDATE task_usage SET open_tasks = open_tasks + ? WHERE namespace = ?"
SELECT_USAGE = "SELECT open_tasks FROM task_usage WHERE namespace = ?"
# A namespace's second of rate, drawn by compare-and-set: the first draw inserts the row,
# later ones move ``used`` from the value they read.
DRAW_FIRST = "INSERT INTO quota_rate (namespace, second, used) VALUES (?, ?, ?) IF NOT EXISTS"
DRAW_MORE = "UPDATE quota_rate SET used = ? WHERE namespace = ? AND second = ? IF used = ?"
# Compare-and-set rounds one draw tries before it grants nothing: processes drawing at the
# same instant each lose at most a few.
_DRAW_TRIES = 6
# The task table is keyed by (namespace, task id), so a namespace's tasks are spread over the
# whole token ring: a recount reads the ring in RING_PARTS token ranges, PARTS_AT_ONCE at a
# time, each in pages of _ROWS_PER_PAGE, and counts on the client. Each call reads a
# bounded share of the table, in parallel, and never asks a node to filter it.
COUNT_RANGE = (
    "SELECT namespace, state FROM tasks WHERE token(namespace, task_id) >= ?"
    " AND token(namespace, task_id) <= ?"
)
RING_PARTS, PARTS_AT_ONCE, _ROWS_PER_PAGE = 256, 8, 5_000
_RING_LOW, _RING_SPAN = -(2**63), 2**64 // 256


def ring_part(part: int) -> list[int]:
    """The first and last token of part ``part`` of the ring (the last part ends the ring)."""
    low = _RING_LOW + part * _RING_SPAN
    return [low, 2**63 - 1 if part == RING_PARTS - 1 else low + _RING_SPAN - 1]


# How long a usage read waits for a counter flush under way before it reads beside it.
USAGE_WAIT_S = 1.0


def count_usage(db: CassandraSession, changes: Iterable[tuple[str, int]]) -> None:
    """Add each (namespace, delta) to the namespaces' unfinished-task counters, after the task
    rows they count were written. The deltas go to the session's counter tally, which writes
    one update per namespace about twice a second in the background: a task write never waits
    for a counter (``tikk.drivers.cassandra_counters`` says why, with the figures)."""
    for namespace, delta in changes:
        db.counters.add(ADD_USAGE, [namespace], delta)


async def set_usage_deltas(db: CassandraSession, deltas: Mapping[str, int]) -> None:
    """Move each namespace's counter by its delta; raises ``BackendUnavailable``."""
    await db.execute_many([db.bind(ADD_USAGE, [d, ns]) for ns, d in deltas.items() if d])


class CassandraQuotaStore:
    """``QuotaStore`` on a keyspace; ``session`` may be shared with the other backends of the
    keyspace (``start``/``close`` count its users)."""

    def __init__(self, session: CassandraSession) -> None:
        self._db = session

    async def get(self, namespace: str) -> NamespaceQuotas:
        rows = await self._db.execute(SELECT_QUOTAS, [namespace])
        return NamespaceQuotas(*rows[0]) if rows else NamespaceQuotas()

    async def put(self, namespace: str, quotas: NamespaceQuotas, now_ms: int) -> None:
        values = [getattr(quotas, n) for n in QUOTA_NAMES]
        await self._db.execute(INSERT_QUOTAS, [namespace, *values, now_ms])

    async def usage(self, namespace: str) -> NamespaceUsage:
        return NamespaceUsage(tasks_stored=max(0, await self._counted(namespace)))

    async def count_open(self, namespace: str, part: int) -> OpenCount:
        parts = range(part, min(part + PARTS_AT_ONCE, RING_PARTS))
        statements = []
        for p in parts:
            statement = self._db.bind(COUNT_RANGE, ring_part(p))
            statement.fetch_size = _ROWS_PER_PAGE
            statements.append(statement)
        answers = await self._db.execute_many(statements)
        open_states = {int(s) for s in TaskState if not s.finished}
        found = read = 0
        for rows in answers:
            read += len(rows)
            found += sum(r.namespace == namespace and r.state in open_states for r in rows)
        return OpenCount(found, read, parts.stop if parts.stop < RING_PARTS else -1)

    async def draw_rate(self, namespace: str, second: int, wanted: int, per_second: int) -> int:
        granted = min(wanted, per_second)
        if granted <= 0:
            return 0
        rows = await self._db.execute(DRAW_FIRST, [namespace, second, granted])
        for _ in range(_DRAW_TRIES):
            if rows[0][0]:  # applied
                return granted
            # Refused: the row's current value came back (none if it expired meanwhile).
            used = getattr(rows[0], "used", None)
            granted = 0 if used is None else min(wanted, per_second - int(used))
            if used is None or granted <= 0:
                return 0
            rows = await self._db.execute(DRAW_MORE, [used + granted, namespace, second, used])
        return granted if rows[0][0] else 0

    async def namespaces(self) -> Sequence[str]:
        # Two small tables read whole: a row per namespace each.
        usage, quotas = await self._db.execute_many([
            self._db.bind("SELECT namespace FROM task_usage", []),
            self._db.bind("SELECT namespace FROM namespace_quotas", []),
        ])  # fmt: skip
        return sorted({r.namespace for r in [*usage, *quotas]})

    async def put_usage(self, namespace: str, usage: NamespaceUsage) -> None:
        # A counter cannot be set, only moved: by the difference to what it holds now.
        delta = usage.tasks_stored - await self._counted(namespace)
        await set_usage_deltas(self._db, {namespace: delta})  # a repair must not fail quietly

    async def _counted(self, namespace: str) -> int:
        """The stored counter plus this process's deltas not yet confirmed written."""
        tally = self._db.counters
        async with tally.settled(USAGE_WAIT_S):
            rows = await self._db.execute(SELECT_USAGE, [namespace])
            stored = int(rows[0].open_tasks or 0) if rows else 0
            return stored + tally.unconfirmed(ADD_USAGE, [namespace])

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()
