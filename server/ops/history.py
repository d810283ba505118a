"""Reads of the run history, independent of gRPC: ``HistoryOps``.

Runs of one task, runs of a queue in a time range, one run by id, and what became of a
schedule's occurrences. Each read is bounded by the history's own rules (a page, a bounded
partition range per call); dead letters are the task store's (``server.ops.tasks``).
"""

from __future__ import annotations

from history.run_history import RunHistory
from tikk.model import Page, RunQuery, RunRecord
from tikk.schedules.model import OccurrenceQuery, OccurrenceRecord


class HistoryOps:
    """What the run history answers (see ``history.run_history.RunHistory``)."""

    def __init__(self, history: RunHistory) -> None:
        self._history = history

    async def run(self, namespace: str, run_id: str) -> RunRecord:
        """One run; raises ``NotFound``."""
        return await self._history.get(namespace, run_id)

    async def runs_of_task(
        self, namespace: str, task_id: str, size: int, token: str
    ) -> Page[RunRecord]:
        """Runs of one task, newest recorded first."""
        return await self._history.list_for_task(namespace, task_id, size, token)

    async def runs(self, query: RunQuery, size: int, token: str) -> Page[RunRecord]:
        """Runs of a queue the server recorded in the query's range (its own clock, not the
        worker's finish time), newest first; a page may be short (even empty) with a next
        token when the range is sparse."""
        return await self._history.list_by_queue(query, size, token)

    async def occurrences(
        self, query: OccurrenceQuery, size: int, token: str
    ) -> Page[OccurrenceRecord]:
        """What became of a schedule's occurrences in the query's range, newest first."""
        return await self._history.list_occurrences(query, size, token)
