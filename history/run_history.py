"""The run-history interface. Records are appended, never updated in place.

Runs are filed by the time the server recorded them (``RunRecord.recorded_ms``, its own
clock), never by the times a worker reported: listings are ordered by it and time queries
select by it. Rows written before that time was kept stand in with their finish time.

Backends: ``history.sqlite`` (embedded) and ``history.cassandra``. Every method may raise
``BackendUnavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tikk.model import Page, RunQuery, RunRecord, RunStatus
from tikk.schedules.model import OccurrenceQuery, OccurrenceRecord

# Column order of a stored run (``RunRecord``'s fields, in order) and of a stored occurrence,
# shared by the SQLite and Cassandra backends so that a field added to a record is added to
# both in one place.
RUN_COLUMNS = (
    "namespace", "run_id", "task_id", "queue", "handler", "attempt", "status", "scheduled_ms",
    "due_ms", "fired_ms", "started_ms", "finished_ms", "recorded_ms", "worker_id",
    "error_type", "error_message", "output", "idempotency_key", "traceback",
)  # fmt: skip
_FINISHED, _RECORDED = RUN_COLUMNS.index("finished_ms"), RUN_COLUMNS.index("recorded_ms")
_OUTPUT, _TRACEBACK = RUN_COLUMNS.index("output"), RUN_COLUMNS.index("traceback")
OCCURRENCE_COLUMNS = (
    "namespace", "schedule_id", "nominal_ms", "outcome", "fire_ms", "decided_ms", "task_id",
    "reason",
)  # fmt: skip


def run_values(r: RunRecord) -> list[Any]:
    """The values of ``r`` in ``RUN_COLUMNS`` order, as both backends store them."""
    return [
        r.namespace, r.run_id, r.task_id, r.queue, r.handler, r.attempt, int(r.status),
        r.scheduled_ms, r.due_ms, r.fired_ms, r.started_ms, r.finished_ms, r.recorded_ms,
        r.worker_id, r.error_type, r.error_message, r.output, r.idempotency_key, r.traceback,
    ]  # fmt: skip


def run_from_row(row: Sequence[Any]) -> RunRecord:
    """The record of a row read in ``RUN_COLUMNS`` order (an empty blob, and the traceback of a
    row stored before runs kept one, may read as None).
    A row written before the server's time was kept has none: its finish time stands in,
    which is the time it was filed under then (a Cassandra listing row of that time has no
    separate finish time: its filing time stands in for that, see ``history.cassandra``)."""
    values = list(row)
    values[6] = RunStatus(values[6])
    values[_OUTPUT] = bytes(values[_OUTPUT] or b"")
    values[_TRACEBACK] = values[_TRACEBACK] or ""
    finished, recorded = values[_FINISHED], values[_RECORDED]
    values[_FINISHED] = recorded if finished is None else finished
    values[_RECORDED] = finished if recorded is None else recorded
    return RunRecord(*values)


class RunHistory(Protocol):
    """Durable, append-only log of runs, queryable by task and by (queue, time range)."""

    async def append(self, record: RunRecord) -> None:
        """Store ``record``. Idempotent on (namespace, run_id) for the same values: the same
        run reported twice (e.g. after a lost acknowledgement) is stored once, provided the
        repeat carries the ``recorded_ms`` of its first recording (which ``get`` returns), as
        it is filed under that time."""
        ...

    async def append_many(self, records: Sequence[RunRecord]) -> None:
        """``append`` for each record, written together (a worker's results arrive in
        bursts). Either every record is stored when this returns, or it raises and may have
        stored some: appending them again is harmless."""
        ...

    async def get(self, namespace: str, run_id: str) -> RunRecord:
        """One run; raises ``NotFound``."""
        ...

    async def list_for_task(
        self, namespace: str, task_id: str, page_size: int, page_token: str
    ) -> Page[RunRecord]:
        """Runs of one task, newest (by the time the server recorded them) first."""
        ...

    async def list_by_queue(
        self, query: RunQuery, page_size: int, page_token: str
    ) -> Page[RunRecord]:
        """Runs matching ``query`` (by the time the server recorded them), newest first. A
        call's cost is bounded whatever the span: a backend may return fewer than
        ``page_size`` runs (none, even) with a next token when the range is sparse; the
        listing ends only without a token. Raises ``InvalidArgument`` for a malformed
        token."""
        ...

    async def record_occurrences(self, records: Sequence[OccurrenceRecord]) -> None:
        """Store what became of schedule occurrences. Idempotent on (namespace, schedule id,
        nominal instant, outcome): a replayed step stores its decisions once, while an
        occurrence missed and later backfilled keeps both records."""
        ...

    async def list_occurrences(
        self, query: OccurrenceQuery, page_size: int, page_token: str
    ) -> Page[OccurrenceRecord]:
        """Records matching ``query``, newest nominal instant first; a short page may have a
        next token, as in ``list_by_queue``. Raises ``InvalidArgument`` for a malformed
        token."""
        ...

    def keep_for(self, namespace: str, seconds: int | None) -> None:
        """Keep the namespace's runs appended from now on ``seconds`` (None: as the history
        keeps them by itself). A history whose rows expire by themselves (Cassandra) writes
        it as their TTL; one that ``prune`` empties (SQLite) needs nothing here."""
        ...

    async def prune(self, namespace: str, before_ms: int, most: int) -> int:
        """Delete up to ``most`` of the namespace's runs recorded before ``before_ms`` (and
        occurrences decided before it); how many runs were deleted. A backend whose rows
        expire by themselves (Cassandra's TTL) deletes nothing here and returns 0."""
        ...

    async def ping(self) -> None:
        """Ask the backend the cheapest question that proves it answers now, as a readiness
        probe does (on Cassandra a one-row read at the configured consistency). Reads no
        run, writes nothing; idempotent. Raises ``BackendUnavailable`` when it does not
        answer (the caller bounds the wait)."""
        ...

    async def start(self) -> None:
        """Open connections and files (nothing is opened by the constructor). A backend
        sharing a driver session with others starts it if none has yet."""
        ...

    async def close(self) -> None:
        """Release what ``start`` opened; idempotent."""
        ...
