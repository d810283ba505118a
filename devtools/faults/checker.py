"""The checker: pure functions from a run's ``History`` to what went wrong and how late.

Violations (any one fails the run):

* **lost**: accepted, not cancelled, and never started by the end of the drain;
* **early**: a handler start before the due time of that attempt (the due time the delivery
  carried, and for a first attempt also the ``run_at`` the client sent);
* **cancelled but ran**: a cancel returned OK and the task started anyway; or a bulk cancel
  left a task CANCELLED, outside the store's cancel fence of its due time, and it started;
* **key inconsistency**: the starts of one task carry more than one idempotency key;
* **dead-letter inexactness**: an always-failing task did not end DEAD_LETTERED after exactly
  attempts 1..max_attempts (and in ``ListDeadLetters``), or a fail-once task did not end
  SUCCEEDED at attempt 2 after attempts 1 and 2.

Measured, not failing: duplicates (starts of one (task, attempt) beyond the first, which
at-least-once allows around a crash), attributed to the fault whose window they follow; and
the timing that ``lateness`` measures: lateness (due → first handler start of each attempt)
for dues inside a fault window or less than ``after_ms`` after one, outside, and over the
whole run; per kind of fault, how soon handler starts resumed, the worst lateness of what came
due during it, and how late in-flight runs of a killed worker were run again.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from devtools.faults.lateness import (
    UNATTRIBUTED,
    KillRecovery,
    Percentiles,
    WholeRun,
    lateness,
    recovery,
    whole_run,
)
from devtools.faults.records import (
    CANCEL_FENCE_MS,
    Crash,
    FaultWindow,
    FinalState,
    History,
    Start,
    TaskKind,
)

# The timing a CheckResult holds is measured in ``lateness``; its names are this module's too.
__all__ = [
    "CheckResult", "Duplicates", "Early", "Inexact", "KillRecovery", "Percentiles", "WholeRun",
    "cancelled", "cancelled_but_ran", "check", "dead_letter_inexact", "duplicates", "early",
    "key_inconsistent", "lateness", "lost", "near_fault", "recovery", "unexpected_dead_letters",
    "unfinished",
]  # fmt: skip

# A start within this long of a fault window (before its start or after its end) can be
# attributed to it: a Kafka group notices a dead member after 10 s, ZooKeeper after 4 s.
ATTRIBUTION_MS = 30_000
# Create outcomes that leave it unknown whether the task exists.
_UNSETTLED = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "NOT_SENT"})


@dataclass(frozen=True)
class Early:
    start: Start
    due_ms: int

    @property
    def by_ms(self) -> int:
        return self.due_ms - self.start.started_ms


@dataclass(frozen=True)
class Duplicates:
    """Starts beyond the first per (task, attempt): in total and per attributed fault kind."""

    total: int
    runs_affected: int
    by_fault: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Inexact:
    """A task whose retries did not end as its kind prescribes."""

    task_id: str
    kind: TaskKind
    expected: str
    found: str


@dataclass(frozen=True)
class CheckResult:
    created: int
    accepted: int
    refused: int
    indeterminate: int
    accepted_after_retry: int
    cancels_ok: int
    cancels_refused: int
    cancels_indeterminate: int
    # Tasks a bulk cancel left CANCELLED, of those in its batches.
    bulk_cancelled: int
    bulk_batched: int
    starts: int
    lost: tuple[str, ...]
    # How the lost tasks ended (``GetTask``) and which fault their due time was near.
    lost_states: tuple[tuple[str, int], ...]
    lost_near: tuple[tuple[str, int], ...]
    early: tuple[Early, ...]
    duplicates: Duplicates
    cancelled_but_ran: tuple[str, ...]
    key_inconsistent: tuple[str, ...]
    dead_letter_inexact: tuple[Inexact, ...]
    unexpected_dead_letters: tuple[str, ...]
    unfinished: tuple[FinalState, ...]
    lateness_inside: Percentiles
    lateness_outside: Percentiles
    recovery: tuple[KillRecovery, ...]
    fault_counts: tuple[tuple[str, int], ...]
    whole_run: WholeRun
    crashes: tuple[Crash, ...] = ()

    @property
    def failures(self) -> list[str]:
        """One line per kind of violation found; empty when the run upheld every promise."""
        found = [
            ("lost", len(self.lost)),
            ("early", len(self.early)),
            ("cancelled but ran", len(self.cancelled_but_ran)),
            ("idempotency key inconsistent", len(self.key_inconsistent)),
            ("dead-letter / retry inexact", len(self.dead_letter_inexact)),
            ("crashed on its own", len(self.crashes)),
        ]
        return [f"{name}: {n}" for name, n in found if n]

    @property
    def failed(self) -> bool:
        return bool(self.failures)


def check(history: History, after_ms: int = 5_000) -> CheckResult:
    """Everything the checker knows about one run."""
    accepted = [c for c in history.creates if c.accepted]
    finals = {f.task_id: f for f in history.finals}
    dues = {c.task_id: c.due_ms for c in history.creates}
    missing = lost(history)
    return CheckResult(
        created=len(history.creates),
        accepted=len(accepted),
        refused=sum(1 for c in history.creates if c.outcome not in _UNSETTLED | {"OK"}),
        indeterminate=sum(1 for c in history.creates if c.outcome in _UNSETTLED),
        accepted_after_retry=sum(1 for c in accepted if c.retried),
        cancels_ok=sum(1 for c in history.cancels if c.ok),
        cancels_refused=sum(1 for c in history.cancels if not c.ok and not c.indeterminate),
        cancels_indeterminate=sum(1 for c in history.cancels if c.indeterminate),
        bulk_cancelled=len(bulk_cancelled(history)),
        bulk_batched=sum(len(b.task_ids) for b in history.bulk_cancels),
        starts=len(history.starts),
        lost=missing,
        lost_states=_tally(finals[t].state if t in finals else "UNREAD" for t in missing),
        lost_near=_tally(near_fault(dues[t], history.faults) for t in missing),
        early=early(history),
        duplicates=duplicates(history.starts, history.faults),
        cancelled_but_ran=cancelled_but_ran(history),
        key_inconsistent=key_inconsistent(history.starts),
        dead_letter_inexact=dead_letter_inexact(history),
        unexpected_dead_letters=unexpected_dead_letters(history),
        unfinished=unfinished(history, finals),
        lateness_inside=lateness(history.starts, history.faults, after_ms, inside=True),
        lateness_outside=lateness(history.starts, history.faults, after_ms, inside=False),
        recovery=recovery(history.starts, history.faults, after_ms),
        fault_counts=tuple(sorted(Counter(str(w.kind) for w in history.faults).items())),
        whole_run=whole_run(history),
        crashes=history.crashes,
    )


def cancelled(history: History) -> set[str]:
    """Tasks taken out by a cancel: it returned OK, or its outcome was unknown and the task
    ended CANCELLED (the call took effect although its answer was lost)."""
    finals = {f.task_id: f.state for f in history.finals}
    one_by_one = {
        c.task_id
        for c in history.cancels
        if c.ok or (c.indeterminate and finals.get(c.task_id) == "CANCELLED")
    }
    return one_by_one | bulk_cancelled(history)


def bulk_cancelled(history: History) -> set[str]:
    """Tasks of a bulk cancel's batches that ended CANCELLED (an action reports counts, not
    which tasks it took: their final state says)."""
    finals = {f.task_id: f.state for f in history.finals}
    batched = {t for b in history.bulk_cancels for t in b.task_ids}
    return {t for t in batched if finals.get(t) == "CANCELLED"}


def _tally(values: Iterable[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(Counter(values).items()))


def near_fault(t_ms: int, faults: Sequence[FaultWindow]) -> str:
    """The kind of the fault whose window is nearest ``t_ms`` (one holding it is at distance
    0; the latest wins a tie), looking no further than ``ATTRIBUTION_MS``; ``UNATTRIBUTED``
    if none is that near."""

    def distance(w: FaultWindow) -> int:
        return max(0, w.start_ms - t_ms, t_ms - w.end_ms)

    near = [w for w in faults if distance(w) <= ATTRIBUTION_MS]
    if not near:
        return UNATTRIBUTED
    return str(min(near, key=lambda w: (distance(w), -w.start_ms)).kind)


def lost(history: History) -> tuple[str, ...]:
    """Accepted, not cancelled, never started."""
    started = {s.task_id for s in history.starts}
    gone = cancelled(history)
    return tuple(
        sorted(
            c.task_id
            for c in history.creates
            if c.accepted and c.task_id not in started and c.task_id not in gone
        )
    )


def early(history: History) -> tuple[Early, ...]:
    """Starts before the due time of their attempt. Every start is checked, accepted or
    not: a task that runs at all must not run early."""
    requested = {c.task_id: c.due_ms for c in history.creates}
    found = []
    for s in history.starts:
        due = s.due_ms
        if s.attempt == 1 and s.task_id in requested:
            due = max(due, requested[s.task_id])
        if s.started_ms < due:
            found.append(Early(s, due))
    return tuple(sorted(found, key=lambda e: (e.start.task_id, e.start.started_ms)))


def cancelled_but_ran(history: History) -> tuple[str, ...]:
    """Tasks whose cancel returned OK and that started anyway; and tasks a bulk cancel left
    CANCELLED that started although the cancel was written outside the cancel fence (one
    written inside it is acknowledged as unsettled: it may still run once)."""
    started = {s.task_id for s in history.starts}
    one_by_one = {c.task_id for c in history.cancels if c.ok and c.task_id in started}
    finals = {f.task_id: f for f in history.finals}
    dues = {c.task_id: c.due_ms for c in history.creates}
    settled = {
        t for t in bulk_cancelled(history)
        if dues[t] - finals[t].updated_ms >= CANCEL_FENCE_MS and t in started
    }  # fmt: skip
    return tuple(sorted(one_by_one | settled))


def key_inconsistent(starts: Iterable[Start]) -> tuple[str, ...]:
    """Tasks whose starts carry more than one idempotency key."""
    keys: dict[str, set[str]] = defaultdict(set)
    for s in starts:
        keys[s.task_id].add(s.key)
    return tuple(sorted(t for t, k in keys.items() if len(k) > 1))


def duplicates(starts: Sequence[Start], faults: Sequence[FaultWindow]) -> Duplicates:
    """Starts per (task, attempt) beyond the first. Each extra start is attributed to the
    latest fault that began before it, ended less than ``ATTRIBUTION_MS`` before it, and
    began less than ``ATTRIBUTION_MS`` after the first start of that run."""
    runs: dict[tuple[str, int], list[Start]] = defaultdict(list)
    for s in sorted(starts, key=lambda s: s.started_ms):
        runs[s.run].append(s)
    by_fault: Counter[str] = Counter()
    affected = 0
    for group in runs.values():
        if len(group) < 2:
            continue
        affected += 1
        for extra in group[1:]:
            by_fault[_attribute(group[0], extra, faults)] += 1
    return Duplicates(sum(by_fault.values()), affected, tuple(sorted(by_fault.items())))


def _attribute(first: Start, extra: Start, faults: Sequence[FaultWindow]) -> str:
    candidates = [
        w
        for w in faults
        if w.start_ms <= extra.started_ms <= w.end_ms + ATTRIBUTION_MS
        and first.started_ms <= w.end_ms + ATTRIBUTION_MS
        and w.start_ms - ATTRIBUTION_MS <= first.started_ms
    ]
    if not candidates:
        return UNATTRIBUTED
    return str(max(candidates, key=lambda w: w.start_ms).kind)


def _started_attempts(starts: Iterable[Start]) -> dict[str, set[int]]:
    attempts: dict[str, set[int]] = defaultdict(set)
    for s in starts:
        attempts[s.task_id].add(s.attempt)
    return attempts


def dead_letter_inexact(history: History) -> tuple[Inexact, ...]:
    """Always-failing tasks that did not end DEAD_LETTERED after exactly attempts
    1..max_attempts, and fail-once tasks that did not end SUCCEEDED at attempt 2."""
    finals = {f.task_id: f for f in history.finals}
    attempts = _started_attempts(history.starts)
    found = []
    for c in history.creates:
        if not c.accepted or c.kind not in (TaskKind.ALWAYS_FAIL, TaskKind.FAIL_ONCE):
            continue
        last = c.max_attempts if c.kind is TaskKind.ALWAYS_FAIL else 2
        want_state = "DEAD_LETTERED" if c.kind is TaskKind.ALWAYS_FAIL else "SUCCEEDED"
        final = finals.get(c.task_id, FinalState(c.task_id, "UNREAD", 0))
        ran = sorted(attempts.get(c.task_id, set()))
        listed = c.task_id in history.dead_letters
        ok = (
            final.state == want_state
            and final.attempt == last
            and ran == list(range(1, last + 1))
            and listed == (c.kind is TaskKind.ALWAYS_FAIL)
        )
        if not ok:
            expected = f"{want_state} at attempt {last}, attempts 1..{last} started"
            found_text = (
                f"{final.state} at attempt {final.attempt}, attempts started {ran}"
                f"{', in dead letters' if listed else ', not in dead letters'}"
            )
            found.append(Inexact(c.task_id, c.kind, expected, found_text))
    return tuple(found)


def unexpected_dead_letters(history: History) -> tuple[str, ...]:
    """Dead-lettered tasks that were meant to succeed (e.g. a message the queue gave up on
    after it was handed out too often)."""
    kinds = {c.task_id: c.kind for c in history.creates}
    meant = {TaskKind.OK, TaskKind.CANCEL, TaskKind.BULK_CANCEL, TaskKind.FAIL_ONCE}
    return tuple(sorted(t for t in history.dead_letters if kinds.get(t) in meant))


def unfinished(history: History, finals: Mapping[str, FinalState]) -> tuple[FinalState, ...]:
    """Accepted tasks meant to succeed that are in another state after the drain (a result
    never recorded leaves a task DISPATCHED). Tasks whose state was not read are skipped."""
    gone = cancelled(history)
    found = []
    for c in history.creates:
        final = finals.get(c.task_id)
        if not c.accepted or final is None or c.task_id in gone:
            continue
        escaped = c.kind in (TaskKind.OK, TaskKind.CANCEL, TaskKind.BULK_CANCEL)
        if escaped and final.state != "SUCCEEDED":
            found.append(final)
    return tuple(found)
