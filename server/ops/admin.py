"""Administration of namespaces, independent of gRPC: ``AdminOps`` reads and replaces a
namespace's quotas and repairs its usage count.

A change is stored at once; this process reads it at its next call, the others within their
quota cache (``QuotaSettings.cache_ms``), none needing a restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.ops.quotas import QuotaGate
from tikk.clock import Clock
from tikk.quotas import NamespaceQuotas, NamespaceUsage
from tikk.store.quotas import QuotaStore


@dataclass(frozen=True)
class QuotaReport:
    """A namespace's own quotas, those in force (its own over the server's defaults), and
    its usage as the store counts it."""

    namespace: str
    own: NamespaceQuotas
    effective: NamespaceQuotas
    usage: NamespaceUsage


class AdminOps:
    """Quotas and usage of namespaces."""

    def __init__(self, store: QuotaStore, gate: QuotaGate, clock: Clock) -> None:
        self._store = store
        self._gate = gate
        self._clock = clock

    async def quotas(self, namespace: str) -> QuotaReport:
        own = await self._store.get(namespace)
        usage = await self._store.usage(namespace)
        return QuotaReport(namespace, own, await self._gate.quotas(namespace), usage)

    async def set_quotas(self, namespace: str, quotas: NamespaceQuotas) -> QuotaReport:
        """Replace the namespace's quotas (a quota not set is cleared)."""
        await self._store.put(namespace, quotas, self._clock.now_ms())
        self._gate.forget(namespace)
        return await self.quotas(namespace)

    async def recount(self, namespace: str) -> QuotaReport:
        """Correct the usage to a count of the namespace's stored unfinished tasks, every
        part of the task rows in this call (``BulkActions`` recounts as an operation with
        progress, for stores too large for one call)."""
        part, found = 0, 0
        while part >= 0:
            counted = await self._store.count_open(namespace, part)
            found, part = found + counted.open_tasks, counted.next_part
        await self._store.put_usage(namespace, NamespaceUsage(tasks_stored=found))
        return await self.quotas(namespace)
