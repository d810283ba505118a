"""Per-namespace quotas, applied in one place: the task, import and schedule operations ask
a ``QuotaGate`` before they write, and a request over a quota is refused whole with
``ResourceExhausted`` naming the quota, its value and the namespace (nothing half-written).

Quotas are read through a cache of ``QuotaSettings.cache_ms``: a change made by an admin on any
process applies everywhere within that, without a restart.

- tasks_per_second: every server process on the database draws from one allowance per
  namespace and second (``QuotaStore.draw_rate``), a tenth of the rate at a time, so the
  processes of a group and servers on separate hosts admit the rate together. A create
  over what is left of the second is refused ("retry after a moment"), a request larger
  than a whole second's rate can never pass; an import is paced instead (``creating`` with
  ``paced``): it waits for the next seconds' allowance, and while it waits the stream's
  flow control holds the client back. What a process drew and did not use in its second
  lapses with it, so the processes together may admit a little less than the rate.
- tasks_stored: the store's count of unfinished tasks (``tikk.store.quotas``), plus the
  creates this process admitted and is still writing, plus the request. A write that ends
  while the count is being read may or may not be in what the read returns, so it is added
  too (at the quota's edge this can refuse a request the count alone would admit, never
  the other way). Creates running at the same moment on other processes can pass the
  quota together by their own sizes.
- schedules: counted from the schedule listing (up to the quota) before a create.
- import_streams: ImportTasks streams open at once in each process, per namespace they
  carry tasks of (a stream claims a namespace with its first batch of it). Each process of
  a group enforces the whole number: a stream is pinned to one connection, so sharing it
  out would refuse streams depending on where the kernel placed them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass

from tikk.clock import Clock
from tikk.errors import ResourceExhausted
from tikk.quotas import NamespaceQuotas
from tikk.settings import QuotaSettings
from tikk.store.quotas import QuotaStore
from tikk.store.schedules import ScheduleStore


@dataclass
class _Drawn:
    """What this process drew of a namespace's second of rate and has not used yet."""

    second: int
    tokens: int = 0
    spent: bool = False  # the second's allowance is gone: draw no more in it


# A draw takes this share of the rate at once, so a stream of single creates costs the
# store a draw per tenth of the rate, not one per create.
_DRAW_SHARE = 10
# Longest real sleep of a paced import between looks at the clock.
_PACE_POLL_S = 0.1


@dataclass(frozen=True)
class _Cached:
    quotas: NamespaceQuotas
    read_ms: int


class QuotaGate:
    """The quotas of every namespace as this process applies them."""

    def __init__(
        self,
        store: QuotaStore,
        schedules: ScheduleStore,
        clock: Clock,
        settings: QuotaSettings,
    ) -> None:
        self._store = store
        self._schedules = schedules
        self._clock = clock
        self._settings = settings
        self._cache: dict[str, _Cached] = {}
        self._drawn: dict[str, _Drawn] = {}
        self._writing: Counter[str] = Counter()
        self._ended = _EndedWrites()
        self._streams: Counter[str] = Counter()

    async def quotas(self, namespace: str) -> NamespaceQuotas:
        """The quotas in force (the namespace's own over the defaults), at most
        ``cache_ms`` old."""
        now = self._clock.now_ms()
        hit = self._cache.get(namespace)
        if hit is None or now - hit.read_ms >= self._settings.cache_ms:
            own = await self._store.get(namespace)
            hit = _Cached(own.over(self._settings.defaults), now)
            self._cache[namespace] = hit
        return hit.quotas

    def forget(self, namespace: str) -> None:
        """Read the namespace's quotas again on next use (this process changed them)."""
        self._cache.pop(namespace, None)

    @contextlib.asynccontextmanager
    async def creating(
        self, counts: Mapping[str, int], *, paced: bool = False
    ) -> AsyncIterator[None]:
        """Admit creating ``counts[namespace]`` tasks in each namespace, for the duration of
        the write; raises ``ResourceExhausted`` (admitting nothing) if any is over a quota.
        ``paced``: wait for the rate instead of refusing over it (an import)."""
        wanted = {ns: n for ns, n in counts.items() if n > 0}
        effective = {ns: await self.quotas(ns) for ns in wanted}
        taken: dict[str, int] = {}
        try:
            for ns, n in wanted.items():
                await self._take_rate(ns, n, effective[ns].tasks_per_second, paced, taken)
            for ns, n in wanted.items():
                await self._check_stored(ns, n, effective[ns].tasks_stored)
        except ResourceExhausted:
            self._give_back(taken)
            raise
        self._writing.update(wanted)
        try:
            yield
        finally:
            self._writing.subtract(wanted)
            self._ended.add(wanted)

    async def _check_stored(self, namespace: str, adding: int, quota: int | None) -> None:
        if quota is None:
            return
        with self._ended.during_read(namespace) as ended:
            usage = await self._store.usage(namespace)
        pending = self._writing[namespace] + ended.count
        if usage.tasks_stored + pending + adding > quota:
            raise _over(
                "tasks_stored", quota, namespace,
                f"{usage.tasks_stored:,} stored and not finished, {adding:,} more asked",
            )  # fmt: skip

    async def _take_rate(
        self, namespace: str, n: int, quota: int | None, paced: bool, taken: dict[str, int]
    ) -> None:
        """Take ``n`` of the namespace's rate into ``taken``, waiting for later seconds if
        ``paced``; else raise when what is left of this second is less."""
        if quota is None:
            return
        if quota == 0:
            raise _over("tasks_per_second", quota, namespace, "no task may be created")
        if n > quota and not paced:
            raise _over(
                "tasks_per_second", quota, namespace,
                f"{n:,} tasks in one request is more than a second's rate; send smaller "
                "batches, or import them (ImportTasks is paced to the rate)",
            )  # fmt: skip
        taken[namespace] = 0
        while True:
            now = self._clock.now_ms()
            taken[namespace] += await self._draw(
                namespace, now // 1000, n - taken[namespace], quota
            )
            if taken[namespace] >= n:
                return
            if not paced:
                raise _over("tasks_per_second", quota, namespace, "retry after a moment")
            await asyncio.sleep(min(_PACE_POLL_S, (1000 - now % 1000) / 1000))

    async def _draw(self, namespace: str, second: int, wanted: int, quota: int) -> int:
        """Up to ``wanted`` of the namespace's rate in ``second``: from what this process
        drew already, drawing more from the store when that falls short."""
        drawn = self._drawn.get(namespace)
        if drawn is None or drawn.second != second:  # what was left of an earlier second lapses
            drawn = self._drawn[namespace] = _Drawn(second)
        if drawn.tokens < wanted and not drawn.spent:
            asked = min(quota, max(wanted - drawn.tokens, quota // _DRAW_SHARE))
            got = await self._store.draw_rate(namespace, second, asked, quota)
            drawn.tokens += got
            drawn.spent = got < asked
        took = min(wanted, drawn.tokens)
        drawn.tokens -= took
        return took

    def _give_back(self, taken: Mapping[str, int]) -> None:
        """Return a refused request's rate to this second's draw (another request of the
        second may use it; a later second's is gone with it)."""
        second = self._clock.now_ms() // 1000
        for namespace, n in taken.items():
            drawn = self._drawn.get(namespace)
            if drawn is not None and drawn.second == second:
                drawn.tokens += n

    async def admit_schedule(self, namespace: str) -> None:
        """Refuse a new schedule if the namespace holds its quota of schedules already."""
        quota = (await self.quotas(namespace)).schedules
        if quota is None:
            return
        held = await self._count_schedules(namespace, quota + 1)
        if held + 1 > quota:
            raise _over("schedules", quota, namespace, f"{held:,} exist")

    async def _count_schedules(self, namespace: str, most: int) -> int:
        count, token = 0, ""
        while count < most:
            page = await self._schedules.list(namespace, min(1_000, most - count), token)
            count += len(page.items)
            token = page.next_token
            if not token:
                break
        return count

    async def claim_import_stream(self, namespace: str, claimed: set[str]) -> None:
        """Count a stream that now carries tasks of ``namespace`` (unless ``claimed``, the
        namespaces it counts in already, holds it; it is added there). Raises
        ``ResourceExhausted`` if the namespace holds its quota of streams. The stream calls
        ``release_import_streams`` with ``claimed`` when it ends."""
        if namespace in claimed:
            return
        quota = (await self.quotas(namespace)).import_streams
        if namespace in claimed:  # another batch of the stream claimed it meanwhile
            return
        if quota is not None and self._streams[namespace] >= quota:
            raise _over("import_streams", quota, namespace,
                        f"{self._streams[namespace]} ImportTasks streams are open")  # fmt: skip
        self._streams[namespace] += 1
        claimed.add(namespace)

    def release_import_streams(self, claimed: set[str]) -> None:
        self._streams.subtract(claimed)


@dataclass(eq=False)  # each read's own tally, told apart by identity
class _Tally:
    count: int = 0


class _EndedWrites:
    """The creates that ended while a usage count was being read: the read may have seen
    them or not, and they no longer count as being written, so the check adds them."""

    def __init__(self) -> None:
        self._reads: dict[str, list[_Tally]] = {}

    @contextlib.contextmanager
    def during_read(self, namespace: str) -> Iterator[_Tally]:
        tally = _Tally()
        reads = self._reads.setdefault(namespace, [])
        reads.append(tally)
        try:
            yield tally
        finally:
            reads.remove(tally)
            if not reads:
                del self._reads[namespace]

    def add(self, written: Mapping[str, int]) -> None:
        for namespace, n in written.items():
            for tally in self._reads.get(namespace, ()):
                tally.count += n


def _over(quota: str, value: int, namespace: str, detail: str) -> ResourceExhausted:
    return ResourceExhausted(
        f"quota {quota} of namespace {namespace!r} is {value:,}: {detail} (nothing of this "
        "request was written)"
    )
