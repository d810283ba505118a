"""Cron and schedule specs (``tikk.schedules.cron``, ``spec``, ``planner``): arbitrary
expressions, time zones, intervals and bounds end in a spec or ``InvalidArgument`` (never
another exception), and the occurrences of a valid spec move strictly forward, never before
its start, after its end or before the instant they follow."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, example, given
from hypothesis import strategies as st

from devtools.fuzz.messages import cron_text, zone_text
from server.ops.schedules import first_occurrence
from tikk.errors import InvalidArgument
from tikk.schedules.cron import parse_cron
from tikk.schedules.model import (
    CatchUp,
    Overlap,
    Schedule,
    ScheduleAction,
    SchedulePolicy,
)
from tikk.schedules.planner import plan_step
from tikk.schedules.spec import ScheduleSpec, format_local, preview, time_zone, validate
from tikk.timestamps import to_timestamp

NOW_MS = 1_790_000_000_000
_DAY_MS = 86_400_000
# Around now, and out to the edges the API's timestamps allow.
_INSTANT = st.one_of(
    st.integers(NOW_MS - 400 * _DAY_MS, NOW_MS + 400 * _DAY_MS),
    st.integers(-62_135_596_800_000, 253_402_300_799_999),
)
_DURATION = st.one_of(st.integers(0, 10 * _DAY_MS), st.integers(0, 3_650 * _DAY_MS))
# A few zones with daylight saving, odd offsets and no transitions at all.
_ZONES = st.sampled_from(
    ["UTC", "Europe/Oslo", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu",
     "America/Santiago", "Pacific/Chatham", "Etc/GMT-14"]
)  # fmt: skip


@st.composite
def specs(draw: st.DrawFn) -> ScheduleSpec:
    cron = draw(st.one_of(cron_text(), st.just("")))
    return ScheduleSpec(
        cron=cron,
        interval_ms=0 if cron and draw(st.booleans()) else draw(_DURATION),
        phase_ms=draw(st.one_of(st.just(0), _DURATION)),
        timezone=draw(st.one_of(_ZONES, zone_text())),
        start_ms=draw(st.none() | _INSTANT),
        end_ms=draw(st.none() | _INSTANT),
        max_runs=draw(st.none() | st.integers(-5, 10**6)),
        jitter_ms=draw(st.one_of(st.just(0), _DURATION)),
    )


_FIELD_RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


@st.composite
def _cron_element(draw: st.DrawFn, low: int, high: int) -> str:
    a = draw(st.integers(low, high))
    b = draw(st.integers(a, high))
    step = draw(st.integers(1, high - low + 1))
    return draw(st.sampled_from(["*", f"*/{step}", f"{a}", f"{a}-{b}", f"{a}-{b}/{step}"]))


@st.composite
def _well_formed_cron(draw: st.DrawFn) -> str:
    fields = [
        ",".join(draw(st.lists(_cron_element(low, high), min_size=1, max_size=3)))
        for low, high in _FIELD_RANGES
    ]
    return " ".join(fields if draw(st.booleans()) else fields[1:])


@st.composite
def runnable_specs(draw: st.DrawFn) -> ScheduleSpec:
    """Specs that mostly pass ``validate``: well-formed cron or an interval, sane bounds."""
    start = draw(st.none() | st.integers(NOW_MS - 30 * _DAY_MS, NOW_MS + 30 * _DAY_MS))
    end = draw(st.none() | st.integers(start or NOW_MS, (start or NOW_MS) + 3_000 * _DAY_MS))
    common = {
        "timezone": draw(_ZONES), "start_ms": start, "end_ms": end,
        "max_runs": draw(st.none() | st.integers(1, 50)), "jitter_ms": draw(st.integers(0, 999)),
    }  # fmt: skip
    if draw(st.booleans()):
        return ScheduleSpec(cron=draw(_well_formed_cron()), **common)  # type: ignore[arg-type]
    interval = draw(st.integers(1_000, 40 * _DAY_MS))
    phase = draw(st.integers(0, interval - 1))
    return ScheduleSpec(interval_ms=interval, phase_ms=phase, **common)  # type: ignore[arg-type]


def _valid_or_none(spec: ScheduleSpec, now_ms: int) -> ScheduleSpec | None:
    try:
        return validate(spec, now_ms=now_ms)
    except InvalidArgument as exc:
        assert exc.field.startswith("spec.")
        return None


@given(st.one_of(cron_text(), st.text(max_size=60)))
@example("*/0 * * * *")
@example("0 0 31 2 *")
@example("60 * * * *")
@example("* * * * * * *")
@example("@reboot")
@example("* * * * *,*/1")  # croniter keeps "*" inside a list: the field is whole
@example("0 *,5 * * *")
def test_any_cron_text_parses_or_names_the_cron_field(text: str) -> None:
    try:
        fields = parse_cron(text)
    except InvalidArgument as exc:
        assert exc.field == "spec.cron"
        return
    assert fields.hours and fields.minutes and fields.seconds
    assert set(fields.hours) <= set(range(24)) and fields.weekdays <= set(range(7))


@given(zone_text())
@example("\x80" * 300)  # longer than a file name may be: the OS refuses to look it up
@example("a" * 5_000)
@example("UTC\x00")
@example("../../../../etc/passwd")
@example("/")
def test_any_zone_name_is_a_zone_or_names_the_timezone_field(name: str) -> None:
    try:
        time_zone(name)
    except InvalidArgument as exc:
        assert exc.field == "spec.timezone"


# The last second a Timestamp holds, 9999-12-31 23:59:59 UTC, and the first, 0001-01-01.
_LAST_S_MS, _FIRST_MS = 253_402_300_799_000, -62_135_596_800_000


@given(specs(), _INSTANT)
# Wall-clock dates past the year 9999 (east of UTC) or before the year 1 (west of it)
# raised OverflowError from datetime.
@example(ScheduleSpec(cron="@yearly", timezone="Australia/Lord_Howe"), 253_402_261_200_000)
@example(ScheduleSpec(cron="* * * * *", timezone="Asia/Tokyo", start_ms=_LAST_S_MS), NOW_MS)
def test_any_spec_validates_or_names_a_spec_field(spec: ScheduleSpec, now_ms: int) -> None:
    _valid_or_none(spec, now_ms)


@given(runnable_specs(), st.integers(NOW_MS - 400 * _DAY_MS, NOW_MS + 400 * _DAY_MS))
def test_occurrences_of_a_valid_spec_move_forward_within_its_bounds(
    spec: ScheduleSpec, after_ms: int
) -> None:
    valid = _valid_or_none(spec, NOW_MS)
    assume(valid is not None)
    assert valid is not None
    found = preview(valid, after_ms=after_ms, schedule_id="s", count=20)
    nominals = [o.nominal_ms for o in found]
    assert nominals == sorted(set(nominals))  # strictly increasing
    for o in found:
        assert o.nominal_ms > after_ms
        assert valid.start_ms is None or o.nominal_ms >= valid.start_ms
        assert valid.end_ms is None or o.nominal_ms <= valid.end_ms
        assert o.nominal_ms <= o.fire_ms < o.nominal_ms + max(1, valid.jitter_ms)


_POLICIES = st.builds(
    SchedulePolicy,
    catch_up_window_ms=st.integers(0, 10 * _DAY_MS),
    catch_up=st.sampled_from(CatchUp),
    catch_up_max_runs=st.integers(1, 1_000),
    overlap=st.sampled_from(Overlap),
    pause_after_failures=st.integers(0, 10),
)


@given(runnable_specs(), _POLICIES, st.integers(0, 30 * _DAY_MS), st.booleans(), st.booleans())
def test_a_planned_step_runs_due_occurrences_in_order_and_moves_on(
    spec: ScheduleSpec, policy: SchedulePolicy, elapsed_ms: int, running: bool, paused: bool
) -> None:
    valid = _valid_or_none(spec, NOW_MS)
    assume(valid is not None)
    assert valid is not None
    action = ScheduleAction(queue="q", handler="h")
    schedule = Schedule(
        namespace="n", schedule_id="s", spec=valid, action=action, policy=policy, shard=0,
        created_ms=NOW_MS, updated_ms=NOW_MS, fingerprint="f", paused=paused,
    ).with_next(first_occurrence(valid, "s", NOW_MS))  # fmt: skip
    now_ms = NOW_MS + elapsed_ms
    step = plan_step(schedule, now_ms, running)
    fired = [o.nominal_ms for o in step.fire]
    assert fired == sorted(set(fired))
    for o in step.fire:
        assert o.fire_ms <= now_ms  # nothing runs before its time
        assert valid.start_ms is None or o.nominal_ms >= valid.start_ms
        assert valid.end_ms is None or o.nominal_ms <= valid.end_ms
    decided = [r.nominal_ms for r in step.records]
    assert len(decided) == len(set(decided))  # each occurrence decided once
    nxt = step.schedule.next_nominal_ms
    if nxt is not None and step.schedule.buffered_nominal_ms is None and decided:
        assert nxt > max(decided)
    assert valid.max_runs is None or step.schedule.runs <= valid.max_runs


@given(runnable_specs())
def test_validation_is_idempotent(spec: ScheduleSpec) -> None:
    valid = _valid_or_none(spec, NOW_MS)
    assume(valid is not None)
    assert valid is not None
    assert validate(valid, now_ms=NOW_MS) == valid
    assert validate(replace(valid), now_ms=NOW_MS) == valid


@given(runnable_specs(), _INSTANT)
@example(ScheduleSpec(cron="* * * * *", timezone="Asia/Tokyo"), _LAST_S_MS)
@example(ScheduleSpec(cron="* * * * *", timezone="America/New_York"), _FIRST_MS)
@example(ScheduleSpec(interval_ms=1_000, timezone="Asia/Tokyo"), _LAST_S_MS)
@example(ScheduleSpec(interval_ms=1_000, timezone="Pacific/Kiritimati"), _FIRST_MS)
def test_occurrences_from_any_instant_are_ones_a_timestamp_and_a_clock_can_show(
    spec: ScheduleSpec, after_ms: int
) -> None:
    valid = _valid_or_none(spec, NOW_MS)
    assume(valid is not None)
    assert valid is not None
    for o in preview(valid, after_ms=after_ms, schedule_id="s", count=3):
        to_timestamp(o.fire_ms)  # raises if outside the years 1-9999
        assert format_local(o.fire_ms, valid.timezone)
