"""The schedule step planner (tikk.schedules.planner): catch-up, overlap, pause and run cap."""

from __future__ import annotations

from dataclasses import replace

from tests.factories import T0, make_schedule
from tikk.schedules.model import (
    CatchUp,
    OccurrenceRecord,
    Outcome,
    Overlap,
    Schedule,
    SchedulePolicy,
)
from tikk.schedules.planner import BUFFER_RECHECK_MS, MAX_PER_STEP, is_current, plan_step
from tikk.schedules.spec import fire_instant

FIRST = T0 + 40_000  # a minute boundary: the pending occurrence of make_schedule
MIN = 60_000


def outcomes(records: list[OccurrenceRecord]) -> list[tuple[int, Outcome]]:
    return [(r.nominal_ms, r.outcome) for r in records]


def test_an_on_time_tick_fires_and_moves_to_the_next_occurrence() -> None:
    step = plan_step(make_schedule(), FIRST + 3, previous_running=False)
    assert [o.nominal_ms for o in step.fire] == [FIRST]
    assert outcomes(step.records) == [(FIRST, Outcome.FIRED)]
    s = step.schedule
    assert (s.next_nominal_ms, s.next_fire_ms, s.runs) == (FIRST + MIN, FIRST + MIN, 1)
    assert s.last_task_id == f"s1@{FIRST}" and s.last_fire_ms == FIRST + 3


def test_late_within_the_window_still_fires_and_says_how_late() -> None:
    step = plan_step(make_schedule(), FIRST + 30_000, previous_running=False)
    assert [o.nominal_ms for o in step.fire] == [FIRST]
    assert step.records[0].reason == "late by 30 s"
    assert step.records[0].lateness_ms == 30_000


def test_downtime_run_once_default_runs_what_is_in_the_window_only() -> None:
    now = FIRST + 10 * MIN
    step = plan_step(make_schedule(), now, previous_running=False)
    # 11 occurrences were due; the last two are at most 60 s late.
    assert [o.nominal_ms for o in step.fire] == [FIRST + 9 * MIN, FIRST + 10 * MIN]
    missed = [r for r in step.records if r.outcome is Outcome.MISSED]
    assert [r.nominal_ms for r in missed] == [FIRST + k * MIN for k in range(9)]
    assert "beyond the catch-up window of 60 s (catch-up: run once)" in missed[0].reason
    assert step.schedule.next_nominal_ms == FIRST + 11 * MIN


def _late_everything(catch_up: CatchUp, cap: int = 100) -> Schedule:
    policy = SchedulePolicy(catch_up_window_ms=10_000, catch_up=catch_up, catch_up_max_runs=cap)
    return make_schedule(policy=policy)


NOW_LATE = FIRST + 10 * MIN + 30_000  # every due occurrence is more than 10 s late


def test_catch_up_skip_runs_nothing_and_records_every_miss() -> None:
    step = plan_step(_late_everything(CatchUp.SKIP), NOW_LATE, previous_running=False)
    assert step.fire == []
    assert outcomes(step.records) == [(FIRST + k * MIN, Outcome.MISSED) for k in range(11)]
    assert step.schedule.next_nominal_ms == FIRST + 11 * MIN and step.schedule.runs == 0


def test_catch_up_run_once_runs_the_latest() -> None:
    step = plan_step(_late_everything(CatchUp.RUN_ONCE), NOW_LATE, previous_running=False)
    assert [o.nominal_ms for o in step.fire] == [FIRST + 10 * MIN]
    assert sum(r.outcome is Outcome.MISSED for r in step.records) == 10


def test_catch_up_run_all_runs_the_latest_up_to_the_cap() -> None:
    step = plan_step(_late_everything(CatchUp.RUN_ALL, cap=3), NOW_LATE, previous_running=False)
    assert [o.nominal_ms for o in step.fire] == [FIRST + k * MIN for k in (8, 9, 10)]
    assert sum(r.outcome is Outcome.MISSED for r in step.records) == 8
    assert step.schedule.runs == 3


def test_paused_skips_and_keeps_the_chain_moving() -> None:
    s = make_schedule().evolve(paused=True, pause_note="maintenance")
    step = plan_step(s, FIRST + 2 * MIN, previous_running=False)
    assert step.fire == []
    assert outcomes(step.records) == [(FIRST + k * MIN, Outcome.SKIPPED_PAUSED) for k in range(3)]
    assert step.records[0].reason == "paused: maintenance"
    assert step.schedule.next_nominal_ms == FIRST + 3 * MIN and step.schedule.runs == 0


def _overlap(policy: Overlap) -> Schedule:
    s = make_schedule(policy=SchedulePolicy(overlap=policy))
    return s.evolve(last_task_id=f"s1@{FIRST - MIN}", runs=1)


def test_overlap_skip_skips_while_the_previous_runs() -> None:
    step = plan_step(_overlap(Overlap.SKIP), FIRST, previous_running=True)
    assert step.fire == [] and outcomes(step.records) == [(FIRST, Outcome.SKIPPED_OVERLAP)]
    assert f"s1@{FIRST - MIN} is still running" in step.records[0].reason
    assert step.schedule.next_nominal_ms == FIRST + MIN
    again = plan_step(_overlap(Overlap.SKIP), FIRST, previous_running=False)
    assert [o.nominal_ms for o in again.fire] == [FIRST]


def test_overlap_allow_runs_regardless() -> None:
    step = plan_step(_overlap(Overlap.ALLOW), FIRST, previous_running=True)
    assert [o.nominal_ms for o in step.fire] == [FIRST] and not step.cancel_previous


def test_overlap_cancel_previous_runs_and_asks_to_cancel() -> None:
    step = plan_step(_overlap(Overlap.CANCEL_PREVIOUS), FIRST, previous_running=True)
    assert [o.nominal_ms for o in step.fire] == [FIRST] and step.cancel_previous
    idle = plan_step(_overlap(Overlap.CANCEL_PREVIOUS), FIRST, previous_running=False)
    assert not idle.cancel_previous


def test_overlap_skip_runs_one_per_step_when_several_are_due() -> None:
    step = plan_step(_overlap(Overlap.SKIP), FIRST + MIN, previous_running=False)
    assert [o.nominal_ms for o in step.fire] == [FIRST + MIN]
    assert outcomes(step.records)[0] == (FIRST, Outcome.SKIPPED_OVERLAP)


def test_buffer_one_waits_for_the_previous_and_then_runs_it() -> None:
    s = _overlap(Overlap.BUFFER_ONE)
    step = plan_step(s, FIRST, previous_running=True)
    assert step.fire == [] and step.records == []
    s = step.schedule
    assert s.buffered_nominal_ms == FIRST
    assert (s.next_nominal_ms, s.next_fire_ms) == (FIRST + MIN, FIRST + BUFFER_RECHECK_MS)
    # Still running at the next occurrence: the buffer holds one, the newcomer is skipped.
    s = plan_step(s, FIRST + BUFFER_RECHECK_MS, previous_running=True).schedule
    step = plan_step(s, FIRST + MIN, previous_running=True)
    assert outcomes(step.records) == [(FIRST + MIN, Outcome.SKIPPED_OVERLAP)]
    assert step.schedule.buffered_nominal_ms == FIRST
    # The previous one finished: the buffered occurrence runs.
    step = plan_step(step.schedule, FIRST + MIN + 1_000, previous_running=False)
    assert [o.nominal_ms for o in step.fire] == [FIRST]
    assert step.schedule.buffered_nominal_ms is None
    assert step.schedule.next_nominal_ms == FIRST + 2 * MIN
    assert step.schedule.last_task_id == f"s1@{FIRST}"


def test_run_cap_ends_the_chain() -> None:
    s = make_schedule()
    s = s.evolve(spec=replace(s.spec, max_runs=2))
    step = plan_step(s, FIRST + MIN, previous_running=False)
    assert len(step.fire) == 2
    assert step.schedule.finished and step.schedule.tick() is None
    assert plan_step(step.schedule, FIRST + 5 * MIN, False).fire == []


def test_a_long_outage_is_decided_in_slices_with_each_occurrence_once() -> None:
    policy = SchedulePolicy(catch_up=CatchUp.RUN_ALL, catch_up_max_runs=5)
    s = make_schedule(interval_ms=1_000, policy=policy)
    now = FIRST + 2 * MAX_PER_STEP * 1_000 + 500
    decided: list[int] = []
    fired: list[int] = []
    steps = 0
    while s.next_fire_ms is not None and s.next_fire_ms <= now:
        step = plan_step(s, now, previous_running=False)
        decided += [r.nominal_ms for r in step.records]
        fired += [o.nominal_ms for o in step.fire]
        s, steps = step.schedule, steps + 1
    total = 2 * MAX_PER_STEP + 1
    assert steps == 3
    assert decided == sorted(decided) and len(set(decided)) == len(decided) == total
    last = FIRST + (total - 1) * 1_000
    # 60 within the 60 s window (the oldest is 59.5 s late), and the 5 latest beyond it.
    assert fired == [last - k * 1_000 for k in reversed(range(65))]


def test_nothing_fires_before_its_jittered_instant() -> None:
    s = make_schedule()
    s = s.evolve(spec=replace(s.spec, jitter_ms=20_000))
    fire = fire_instant(s.spec, FIRST, schedule_id="s1")
    s = s.evolve(next_fire_ms=fire)
    early = plan_step(s, fire - 1, previous_running=False)
    assert early.fire == [] and early.schedule.next_nominal_ms == FIRST
    assert [o.fire_ms for o in plan_step(s, fire, False).fire] == [fire]


def test_a_tick_is_current_only_while_it_matches_the_schedule() -> None:
    s = make_schedule()
    assert is_current(s, FIRST, FIRST)
    assert not is_current(s, FIRST, FIRST + 1)
    assert not is_current(s.evolve(next_nominal_ms=FIRST + MIN), FIRST, FIRST)
