"""What a schedule does when its tick comes due: the one place that applies the catch-up,
overlap, pause and run-cap policies. Pure: the schedule, the instant and whether the previous
occurrence is still running go in; the occurrences to run, a record for every occurrence
decided and the schedule's next state come out.

The policies, in the order they apply to the occurrences that are due (fire instant <= now):

1. *Paused*: every due occurrence is ``SKIPPED_PAUSED``; the chain keeps moving, so resuming
   never replays the pause.
2. *Catch-up*: an occurrence at most ``catch_up_window_ms`` late runs (late). Those later than
   that were missed by a dispatcher that was down or behind: ``SKIP`` runs none of them,
   ``RUN_ONCE`` runs the latest if nothing in the window runs, ``RUN_ALL`` runs the latest
   ``catch_up_max_runs``; the rest are recorded ``MISSED``.
3. *Overlap*, among what catch-up lets run: ``ALLOW`` runs them all. The others run at most
   one per step, as every later one would overlap it: ``SKIP`` runs the latest unless the
   previous occurrence is unfinished, ``CANCEL_PREVIOUS`` runs the latest and cancels an
   unfinished previous one, ``BUFFER_ONE`` keeps one waiting (re-checked every
   ``BUFFER_RECHECK_MS``) until the previous one finishes. The rest are ``SKIPPED_OVERLAP``.
4. *Run cap*: once ``spec.max_runs`` occurrences ran, the chain ends.

A dispatcher that was down for long may find more due occurrences than one step should hold;
it then decides them in slices of ``MAX_PER_STEP`` (the next tick is already due), keeping the
last ``catch_up_max_runs`` for the slice that reaches now, so ``RUN_ALL`` picks the latest.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from tikk.schedules.model import (
    CatchUp,
    OccurrenceRecord,
    Outcome,
    Overlap,
    Schedule,
    occurrence_task_id,
)
from tikk.schedules.spec import Occurrence, fire_instant, next_occurrence, occurrences

MAX_PER_STEP = 10_000
BUFFER_RECHECK_MS = 1_000


@dataclass(frozen=True)
class PlannedStep:
    """The outcome of one tick: run ``fire``, record ``records``, store ``schedule``."""

    schedule: Schedule
    fire: list[Occurrence] = field(default_factory=list)
    records: list[OccurrenceRecord] = field(default_factory=list)
    # The previous occurrence is unfinished and must be cancelled (CANCEL_PREVIOUS).
    cancel_previous: bool = False


def is_current(schedule: Schedule, nominal_ms: int, due_ms: int) -> bool:
    """Whether the tick ``(nominal_ms, due_ms)`` stands for the schedule's pending step."""
    return (schedule.next_nominal_ms, schedule.next_fire_ms) == (nominal_ms, due_ms)


class _Decisions:
    def __init__(self, schedule: Schedule, now_ms: int) -> None:
        self.schedule = schedule
        self.now_ms = now_ms
        self.records: list[OccurrenceRecord] = []

    def add(self, o: Occurrence, outcome: Outcome, reason: str = "") -> None:
        s = self.schedule
        task_id = (
            occurrence_task_id(s.schedule_id, o.nominal_ms) if outcome is Outcome.FIRED else ""
        )
        self.records.append(
            OccurrenceRecord(
                namespace=s.namespace, schedule_id=s.schedule_id, nominal_ms=o.nominal_ms,
                fire_ms=o.fire_ms, outcome=outcome, decided_ms=self.now_ms, task_id=task_id,
                reason=reason,
            )
        )  # fmt: skip


def plan_step(schedule: Schedule, now_ms: int, previous_running: bool) -> PlannedStep:
    """Decide the schedule's due occurrences at ``now_ms`` (see the module docstring)."""
    s = schedule
    if s.next_nominal_ms is None:
        return PlannedStep(s)
    due, final = _due_slice(s, now_ms)
    decisions = _Decisions(s, now_ms)
    buffered = _buffered(s)
    if s.paused:
        reason = f"paused: {s.pause_note}" if s.pause_note else "paused"
        for o in ([buffered] if buffered else []) + due:
            decisions.add(o, Outcome.SKIPPED_PAUSED, reason)
        choice = _Choice([])
    else:
        runnable = _catch_up(s, due, now_ms, final, decisions)
        choice = _overlap(s, runnable, buffered, previous_running, decisions)
    return _advance(s, now_ms, due, choice, decisions)


def _due_slice(s: Schedule, now_ms: int) -> tuple[list[Occurrence], bool]:
    """The due occurrences from the pending one on, and whether they reach now."""
    assert s.next_nominal_ms is not None
    if s.buffered_nominal_ms == s.next_nominal_ms:
        return [], True  # the chain has ended; only the waiting occurrence is left
    first = Occurrence(
        s.next_nominal_ms, fire_instant(s.spec, s.next_nominal_ms, schedule_id=s.schedule_id)
    )
    chain = itertools.chain(
        [first], occurrences(s.spec, after_ms=first.nominal_ms, schedule_id=s.schedule_id)
    )
    due = list(
        itertools.islice(
            itertools.takewhile(lambda o: o.fire_ms <= now_ms, chain), MAX_PER_STEP + 1
        )
    )
    if len(due) <= MAX_PER_STEP:
        return due, True
    return due[: MAX_PER_STEP - s.policy.catch_up_max_runs], False


def _buffered(s: Schedule) -> Occurrence | None:
    if s.buffered_nominal_ms is None:
        return None
    nominal = s.buffered_nominal_ms
    return Occurrence(nominal, fire_instant(s.spec, nominal, schedule_id=s.schedule_id))


def _catch_up(
    s: Schedule, due: list[Occurrence], now_ms: int, final: bool, d: _Decisions
) -> list[Occurrence]:
    window = s.policy.catch_up_window_ms
    late = [o for o in due if now_ms - o.fire_ms > window]
    on_time = due[len(late) :]
    keep: list[Occurrence] = []
    # The latest late occurrences are in this slice if it reaches now or the window.
    if late and (final or on_time):
        if s.policy.catch_up is CatchUp.RUN_ONCE and not on_time:
            keep = late[-1:]
        elif s.policy.catch_up is CatchUp.RUN_ALL:
            keep = late[-s.policy.catch_up_max_runs :] if s.policy.catch_up_max_runs > 0 else []
    policy = s.policy.catch_up.name.lower().replace("_", " ")
    for o in late[: len(late) - len(keep)]:
        d.add(o, Outcome.MISSED, f"late by {_secs(now_ms - o.fire_ms)}, beyond the catch-up "
                                 f"window of {_secs(window)} (catch-up: {policy})")  # fmt: skip
    return keep + on_time


@dataclass(frozen=True)
class _Choice:
    runnable: list[Occurrence]
    buffered: Occurrence | None = None
    cancel_previous: bool = False


def _overlap(
    s: Schedule,
    runnable: list[Occurrence],
    buffered: Occurrence | None,
    previous_running: bool,
    d: _Decisions,
) -> _Choice:
    overlap = s.policy.overlap
    if overlap is Overlap.ALLOW:
        return _Choice(runnable)
    if overlap is Overlap.BUFFER_ONE:
        return _buffer_one(
            s, ([buffered] if buffered else []) + runnable, buffered, previous_running, d
        )
    if not runnable:
        return _Choice([])
    for o in runnable[:-1]:
        d.add(o, Outcome.SKIPPED_OVERLAP, "a later occurrence runs instead")
    if overlap is Overlap.SKIP and previous_running:
        d.add(runnable[-1], Outcome.SKIPPED_OVERLAP, _busy(s))
        return _Choice([])
    return _Choice(runnable[-1:], None, overlap is Overlap.CANCEL_PREVIOUS and previous_running)


def _buffer_one(
    s: Schedule,
    pool: list[Occurrence],
    buffered: Occurrence | None,
    previous_running: bool,
    d: _Decisions,
) -> _Choice:
    """``pool``: the waiting occurrence (if any) first, then the due ones in order."""
    if not pool:
        return _Choice([])
    if previous_running:
        wait = pool[0] if buffered else pool[-1]
        for o in pool:
            if o != wait:
                d.add(o, Outcome.SKIPPED_OVERLAP, f"{_busy(s)} and one occurrence already waits")
        return _Choice([], wait)
    for o in pool[1:-1]:
        d.add(o, Outcome.SKIPPED_OVERLAP, "one occurrence already waits for the one running")
    return _Choice(pool[:1], pool[-1] if len(pool) > 1 else None)


def _busy(s: Schedule) -> str:
    return f"the previous occurrence {s.last_task_id} is still running"


def _advance(
    s: Schedule, now_ms: int, due: list[Occurrence], choice: _Choice, d: _Decisions
) -> PlannedStep:
    runnable, buffered = choice.runnable, choice.buffered
    cap = s.spec.max_runs
    if cap is not None:
        runnable = runnable[: max(0, cap - s.runs)]
    for o in runnable:
        d.add(o, Outcome.FIRED, _late_reason(o, now_ms))
    runs = s.runs + len(runnable)
    nxt: Occurrence | None
    if cap is not None and runs >= cap:
        nxt, buffered = None, None
    elif due:
        nxt = next_occurrence(s.spec, due[-1].nominal_ms, schedule_id=s.schedule_id)
    elif s.next_nominal_ms is None or s.buffered_nominal_ms == s.next_nominal_ms:
        nxt = None
    else:
        nominal = s.next_nominal_ms
        nxt = Occurrence(nominal, fire_instant(s.spec, nominal, schedule_id=s.schedule_id))
    updated = s.evolve(
        runs=runs,
        last_fire_ms=now_ms if runnable else s.last_fire_ms,
        last_task_id=occurrence_task_id(s.schedule_id, runnable[-1].nominal_ms)
        if runnable
        else s.last_task_id,
        buffered_nominal_ms=buffered.nominal_ms if buffered else None,
        updated_ms=now_ms,
    ).with_next(nxt)
    if buffered is not None:
        recheck = now_ms + BUFFER_RECHECK_MS
        if nxt is None:
            # The chain has ended but one occurrence still waits: keep a tick for it.
            updated = updated.evolve(next_nominal_ms=buffered.nominal_ms, next_fire_ms=recheck)
        else:
            updated = updated.evolve(next_fire_ms=min(nxt.fire_ms, recheck))
    return PlannedStep(updated, runnable, d.records, choice.cancel_previous)


def _late_reason(o: Occurrence, now_ms: int) -> str:
    lateness = now_ms - o.fire_ms
    return f"late by {_secs(lateness)}" if lateness >= 1000 else ""


def _secs(ms: int) -> str:
    return f"{ms / 1000:g} s"
