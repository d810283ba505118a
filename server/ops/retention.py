"""Retention: finished tasks and run history older than a namespace's retention are deleted,
a bounded batch at a time, so an embedded store that fires a million tasks a day stays
bounded on disk.

A namespace's retention is kept with its quotas (``task_retention_seconds``,
``history_retention_seconds``; the server's defaults fill those it has not set, and neither
set means as the store keeps them by itself). Each pass looks at every namespace and deletes
at most ``batch`` rows per statement and ``most_per_pass`` per namespace, so a pass never
holds the store long, however much is due to go: the rest goes in the next passes. On
Cassandra every row carries a TTL, and the stores delete nothing here: each pass tells the
store and the history every namespace's retention (``TaskStore.keep_for``,
``RunHistory.keep_for``), which the task rows and runs a server writes from then on carry as
their TTL (task rows at least a day past their due time).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from history.run_history import RunHistory
from server.ops.quotas import QuotaGate
from tikk.clock import Clock
from tikk.errors import BackendUnavailable
from tikk.quotas import kept_seconds
from tikk.store.quotas import QuotaStore
from tikk.store.tasks import TaskStore

log = logging.getLogger("tikk.retention")
# A store's or a history's prune: (namespace, before_ms, most) → how many it deleted.
_Prune = Callable[[str, int, int], Awaitable[int]]


@dataclass(frozen=True)
class RetentionSettings:
    """How often and how much a server deletes."""

    interval_s: float = 30.0
    batch: int = 1_000
    most_per_pass: int = 20_000


@dataclass(frozen=True)
class Pruned:
    """What one pass deleted."""

    tasks: int = 0
    runs: int = 0
    # Namespaces whose prune failed (logged; tried again next pass).
    failed: int = 0


class RetentionPrune:
    """Deletes what every namespace's retention no longer keeps (see the module)."""

    def __init__(
        self, store: TaskStore, history: RunHistory, quotas: QuotaStore, gate: QuotaGate, *,
        clock: Clock, settings: RetentionSettings | None = None,
    ) -> None:  # fmt: skip
        self._store = store
        self._history = history
        self._quotas = quotas
        self._gate = gate
        self._clock = clock
        self._settings = settings or RetentionSettings()

    async def run(self) -> None:
        """Pass after pass until cancelled (a task of the serving process)."""
        while True:
            try:
                done = await self.pass_once()
                if done.tasks or done.runs:
                    log.info("retention deleted %d finished tasks, %d runs", done.tasks, done.runs)
            except BackendUnavailable as exc:
                log.warning("retention pass failed, trying again: %s", exc)
            except Exception:  # a bug must not stop every later pass of this server
                log.exception("retention pass failed unexpectedly; trying again")
            await asyncio.sleep(self._settings.interval_s)

    async def pass_once(self) -> Pruned:
        """One pass over every namespace. A namespace whose prune fails is logged and
        counted, and the pass goes on to the others: one namespace's fault (a backend timing
        out on it, a value the code did not foresee) must not keep every other's data."""
        total = Pruned()
        for namespace in await self._quotas.namespaces():
            try:
                done = await self._prune(namespace)
            except BackendUnavailable as exc:
                log.warning("retention of namespace %r failed, trying again: %s", namespace, exc)
                done = Pruned(failed=1)
            except Exception:
                log.exception("retention of namespace %r failed unexpectedly", namespace)
                done = Pruned(failed=1)
            total = Pruned(
                total.tasks + done.tasks, total.runs + done.runs, total.failed + done.failed
            )
        return total

    async def _prune(self, namespace: str) -> Pruned:
        """What one namespace's retention no longer keeps, deleted (within its share)."""
        kept = await self._gate.quotas(namespace)
        task_s = kept_seconds(kept.task_retention_seconds)
        history_s = kept_seconds(kept.history_retention_seconds)
        self._store.keep_for(namespace, task_s)
        self._history.keep_for(namespace, history_s)
        now = self._clock.now_ms()
        tasks = runs = 0
        if task_s is not None:
            tasks = await self._drain(self._store.prune_finished, namespace, now - task_s * 1000)
        if history_s is not None:
            runs = await self._drain(self._history.prune, namespace, now - history_s * 1000)
        return Pruned(tasks, runs)

    async def _drain(self, prune: _Prune, namespace: str, before_ms: int) -> int:
        """``prune`` batch after batch until it finds less than a batch or the pass's share
        for the namespace is spent."""
        s, deleted = self._settings, 0
        while deleted < s.most_per_pass:
            n = await prune(namespace, before_ms, min(s.batch, s.most_per_pass - deleted))
            deleted += n
            if n < s.batch:
                break
        return deleted
