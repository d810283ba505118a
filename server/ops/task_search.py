"""Reading the tasks a ``TaskFilter`` selects, a bounded read at a time.

A filter is read through one of the store's listings, the narrowest it names: a label's (the
selector's first ``key=value`` term), the dead letters (a filter of dead-lettered tasks, newest
first, so a lower bound on the failure time ends the read early), or a queue's. The other
terms are checked on each task the listing gives. Each ``page`` call makes one read of the
listing: it may return fewer matches than asked (none, even) with a token to go on from, and
the listing ends only without one. So no call costs more than a page, however rare the
matches, and a caller bounds the whole (``count`` stops after ``most_read`` tasks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tikk.clock import Clock
from tikk.errors import InvalidArgument
from tikk.model import Page, Task, TaskState
from tikk.store.tasks import TaskStore
from tikk.task_filters import TaskFilter

# Tasks a count reads at most before it answers with what it found so far.
COUNT_READ_LIMIT = 1_000_000
# Pages of 100 a store's count reads at most for its sample (matches may be sparse).
_SAMPLE_PAGES = 10


@dataclass(frozen=True)
class Count:
    """What a count found: ``matched`` tasks among ``read``; ``complete`` unless it stopped
    at its read limit; the first few matches as a sample."""

    matched: int
    read: int
    complete: bool
    sample: list[Task] = field(default_factory=list)


class TaskSearch:
    """Pages of the tasks a filter selects (see the module)."""

    def __init__(self, store: TaskStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def page(self, f: TaskFilter, size: int, token: str) -> tuple[Page[Task], int]:
        """The matches among the next ``size`` tasks of the filter's listing, and how many
        tasks were read; ``InvalidArgument`` for a filter no listing serves, or a token
        not of this search."""
        listed = await self._listed(f, size, token)
        found = [t for t in listed.items if f.matches(t)]
        if _older_than_wanted(f, listed.items):
            return Page(found, ""), len(listed.items)  # newest first: the rest are older
        return Page(found, listed.next_token), len(listed.items)

    async def count(
        self, f: TaskFilter, *, sample: int = 10, most_read: int = COUNT_READ_LIMIT
    ) -> Count:
        """How many tasks the filter selects, reading at most ``most_read``."""
        if _label_and_state_only(f):
            return await self._count_in_store(f, sample, most_read)
        matched, read, token = 0, 0, ""
        first: list[Task] = []
        while read < most_read:
            page, seen = await self.page(f, min(1_000, most_read - read), token)
            matched, read = matched + len(page.items), read + seen
            first += page.items[: max(0, sample - len(first))]
            token = page.next_token
            if not token:
                return Count(matched, read, True, first)
        return Count(matched, read, False, first)

    async def _count_in_store(self, f: TaskFilter, sample: int, most: int) -> Count:
        """A count the store makes itself (of one label, in one state), with a page's
        matches as the sample."""
        assert f.labels is not None
        term = f.labels.indexed
        found, complete = await self._store.count_by_label(
            f.namespace, (term.key, term.value), f.state, most
        )
        first: list[Task] = []
        token = ""
        for _ in range(_SAMPLE_PAGES):
            if len(first) >= min(sample, found):
                break
            page, _ = await self.page(f, 100, token)
            first += page.items[: sample - len(first)]
            token = page.next_token
            if not token:
                break
        return Count(found, found, complete, first)

    @staticmethod
    def check(f: TaskFilter) -> None:
        """Raise ``InvalidArgument`` for a filter no listing serves."""
        if f.labels is None and not _dead_letters_read(f) and not f.queue:
            raise InvalidArgument(
                "filter", "name a queue, a label selector or the dead-lettered state: a filter "
                "is read through one of their listings, never a scan of the namespace",
            )  # fmt: skip

    async def _listed(self, f: TaskFilter, size: int, token: str) -> Page[Task]:
        self.check(f)
        if f.labels is not None:
            term = f.labels.indexed
            return await self._store.list_by_label(f.namespace, (term.key, term.value), size, token)
        if _dead_letters_read(f):
            now = self._clock.now_ms()
            return await self._store.list_dead_letters(f.namespace, f.queue, size, token, now)
        return await self._store.list_tasks(f.namespace, f.queue, f.state, size, token)


def _label_and_state_only(f: TaskFilter) -> bool:
    """Whether the filter is one ``key=value`` term and at most a state: what a store
    counts without reading the tasks."""
    rest = (f.queue, f.due_from_ms, f.due_until_ms, f.changed_from_ms, f.changed_until_ms,
            f.error_type)  # fmt: skip
    return (
        f.labels is not None
        and len(f.labels.terms) == 1
        and not any(v not in ("", None) for v in rest)
    )


def _dead_letters_read(f: TaskFilter) -> bool:
    return f.labels is None and f.state is TaskState.DEAD_LETTERED


def _older_than_wanted(f: TaskFilter, listed: list[Task]) -> bool:
    """Whether a page of dead letters (newest first) reached those that failed before the
    filter's lower bound: then no later page can match."""
    low = f.changed_from_ms
    return (
        low is not None and _dead_letters_read(f) and bool(listed) and listed[-1].updated_ms < low
    )
