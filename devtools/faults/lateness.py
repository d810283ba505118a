"""Timing of a run: how late handlers started (due → first start of each attempt), around
the faults and over the whole run, and how each kind of fault was recovered from.

Pure functions of the records, like the checker's, which reports what they find; nothing here
fails a run.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from devtools.faults.records import FaultKind, FaultWindow, History, Start

# How far back a killed worker's starts count as in flight when it died.
IN_FLIGHT_MS = 60_000
# A fault that follows another by less than this is not isolated: what came due during it
# may still be late because of the first (a 30 s store outage leaves a backlog).
QUIET_MS = 30_000
UNATTRIBUTED = "none"
# Over the whole run, a start this much after its due time counts as late.
LATE_MS = 10_000
# A create that returned OK this much after its task's due time was held up at the client (a
# server away, a store stopped): that task was late before the scheduler knew it.
ACCEPTED_LATE_MS = 1_000


@dataclass(frozen=True)
class Percentiles:
    """p50, p99 and max of a list of milliseconds (all ``None`` when it is empty)."""

    count: int
    p50: int | None
    p99: int | None
    max: int | None

    @classmethod
    def of(cls, values: Iterable[int]) -> Percentiles:
        ordered = sorted(values)
        if not ordered:
            return cls(0, None, None, None)
        return cls(len(ordered), _rank(ordered, 0.50), _rank(ordered, 0.99), ordered[-1])


def _rank(ordered: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class KillRecovery:
    """Per kind of fault: how many, the slowest resumption of handler starts after one, the
    worst lateness of what came due during one, and in-flight runs of a killed worker that
    were run again (how many, and the longest from the kill to the new start)."""

    kind: FaultKind
    count: int
    max_resume_ms: int | None
    max_delay_ms: int | None
    redelivered: int
    max_redelivery_ms: int | None
    # The same worst lateness over the faults no other fault came near (``isolated``), so
    # that one fault's backlog is not charged to the next.
    isolated: int = 0
    max_isolated_delay_ms: int | None = None
    # From the end of a window to the first start of the last of what came due during it:
    # how long the stack took to catch up once the fault was over.
    max_catch_up_ms: int | None = None


def first_starts(starts: Iterable[Start]) -> dict[tuple[str, int], Start]:
    """The earliest start of each (task, attempt)."""
    first: dict[tuple[str, int], Start] = {}
    for s in starts:
        seen = first.get(s.run)
        if seen is None or s.started_ms < seen.started_ms:
            first[s.run] = s
    return first


def lateness(
    starts: Sequence[Start], faults: Sequence[FaultWindow], after_ms: int, *, inside: bool
) -> Percentiles:
    """Due → first start of each (task, attempt), for dues inside a fault window or less
    than ``after_ms`` after one (``inside``), or for the others."""
    values = [
        s.started_ms - s.due_ms
        for s in first_starts(starts).values()
        if any(w.covers(s.due_ms, after_ms) for w in faults) == inside
    ]
    return Percentiles.of(values)


def recovery(
    starts: Sequence[Start], faults: Sequence[FaultWindow], after_ms: int
) -> tuple[KillRecovery, ...]:
    """Per kind of fault, the figures of ``KillRecovery``."""
    firsts = list(first_starts(starts).values())
    times = sorted(s.started_ms for s in starts)
    by_kind: dict[FaultKind, list[FaultWindow]] = defaultdict(list)
    for w in faults:
        by_kind[w.kind].append(w)
    out = []
    for kind in sorted(by_kind, key=str):
        windows = by_kind[kind]
        resumes = [r for w in windows if (r := _resume_ms(times, w)) is not None]
        worst = {id(w): _worst_delay(firsts, w, after_ms) for w in windows}
        delays = [d for d in worst.values() if d is not None]
        alone = [w for w in windows if _isolated(w, faults, after_ms)]
        alone_delays = [d for w in alone if (d := worst[id(w)]) is not None]
        again = [d for w in windows for d in _redeliveries(starts, w)]
        catch_ups = [c for w in windows if (c := _catch_up(firsts, w, after_ms)) is not None]
        out.append(
            KillRecovery(
                kind=kind,
                count=len(windows),
                max_resume_ms=max(resumes, default=None),
                max_delay_ms=max(delays, default=None),
                redelivered=len(again),
                max_redelivery_ms=max(again, default=None),
                isolated=len(alone),
                max_isolated_delay_ms=max(alone_delays, default=None),
                max_catch_up_ms=max(catch_ups, default=None),
            )
        )
    return tuple(out)


def _resume_ms(sorted_times: Sequence[int], w: FaultWindow) -> int | None:
    """From the fault's start to the next handler start of any task."""
    i = bisect.bisect_left(sorted_times, w.start_ms)
    return sorted_times[i] - w.start_ms if i < len(sorted_times) else None


def _isolated(w: FaultWindow, faults: Sequence[FaultWindow], after_ms: int) -> bool:
    """Whether no other fault began during ``w`` or just after it, or ended less than
    ``QUIET_MS`` before it began (the time a stack is given to catch up)."""
    return not any(
        v is not w and v.start_ms <= w.end_ms + after_ms and v.end_ms + QUIET_MS >= w.start_ms
        for v in faults
    )


def _worst_delay(firsts: Sequence[Start], w: FaultWindow, after_ms: int) -> int | None:
    """The worst due → start of what came due during the window or just after it."""
    late = [s.started_ms - s.due_ms for s in firsts if w.covers(s.due_ms, after_ms)]
    return max(late, default=None)


def _catch_up(firsts: Sequence[Start], w: FaultWindow, after_ms: int) -> int | None:
    """From the end of the window to the last first start of what came due during it."""
    last = max((s.started_ms for s in firsts if w.covers(s.due_ms, after_ms)), default=None)
    return None if last is None else max(0, last - w.end_ms)


def _redeliveries(starts: Sequence[Start], w: FaultWindow) -> list[int]:
    """For a killed worker: runs it started shortly before the kill that started again
    after it, each as the time from the kill to the first new start."""
    if w.kind is not FaultKind.KILL_WORKER or not w.pid:
        return []
    suffix = f"-{w.pid}"
    victims = {
        s.run
        for s in starts
        if s.worker.endswith(suffix) and w.start_ms - IN_FLIGHT_MS <= s.started_ms <= w.start_ms
    }
    again: dict[tuple[str, int], int] = {}
    for s in starts:
        if s.run in victims and s.started_ms > w.start_ms:
            again[s.run] = min(again.get(s.run, s.started_ms), s.started_ms)
    return [t - w.start_ms for t in again.values()]


@dataclass(frozen=True)
class WholeRun:
    """Lateness over every attempt of the run, whether a fault was near or not: what callers
    see when faults come often. ``lateness`` is due → first handler start; ``dispatch`` its
    part up to the delivery being fired (dispatchers and store: read, claim, publish) and
    ``delivery`` the rest (queue and workers). ``late`` counts attempts more than ``LATE_MS``
    late. ``by_last_fault`` is the same lateness grouped by the last fault that began at or
    before the due time, if it ended less than ``QUIET_MS`` before it (``none`` otherwise).
    ``accepted_after_due``: tasks whose create returned OK more than ``ACCEPTED_LATE_MS``
    after their due time. ``fault_every_ms``: the mean time from one fault's start to the
    next's."""

    lateness: Percentiles
    dispatch: Percentiles
    delivery: Percentiles
    late: int
    by_last_fault: tuple[tuple[str, Percentiles], ...]
    accepted_after_due: int
    fault_every_ms: int | None


def whole_run(history: History) -> WholeRun:
    """The figures of ``WholeRun``."""
    firsts = list(first_starts(history.starts).values())
    late = [s.started_ms - s.due_ms for s in firsts]
    return WholeRun(
        lateness=Percentiles.of(late),
        dispatch=Percentiles.of(s.fired_ms - s.due_ms for s in firsts),
        delivery=Percentiles.of(s.started_ms - s.fired_ms for s in firsts),
        late=sum(1 for d in late if d > LATE_MS),
        by_last_fault=by_last_fault(firsts, history.faults),
        accepted_after_due=sum(
            1
            for c in history.creates
            if c.accepted and c.calls[-1].responded_ms > c.due_ms + ACCEPTED_LATE_MS
        ),
        fault_every_ms=fault_spacing(history.faults),
    )


def by_last_fault(
    firsts: Iterable[Start], faults: Sequence[FaultWindow]
) -> tuple[tuple[str, Percentiles], ...]:
    """Lateness of first starts grouped by the kind of the last fault that began at or before
    their due time and ended less than ``QUIET_MS`` before it (``UNATTRIBUTED`` if none)."""
    ordered = sorted(faults, key=lambda w: w.start_ms)
    began = [w.start_ms for w in ordered]
    groups: dict[str, list[int]] = defaultdict(list)
    for s in firsts:
        i = bisect.bisect_right(began, s.due_ms)
        last = ordered[i - 1] if i else None
        kind = UNATTRIBUTED
        if last is not None and s.due_ms <= last.end_ms + QUIET_MS:
            kind = str(last.kind)
        groups[kind].append(s.started_ms - s.due_ms)
    return tuple((kind, Percentiles.of(groups[kind])) for kind in sorted(groups))


def fault_spacing(faults: Sequence[FaultWindow]) -> int | None:
    """The mean time from one fault's start to the next one's (``None`` for fewer than two)."""
    if len(faults) < 2:
        return None
    began = sorted(w.start_ms for w in faults)
    return (began[-1] - began[0]) // (len(began) - 1)
