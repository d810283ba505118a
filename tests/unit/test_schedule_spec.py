"""Schedule specs: checked against a brute-force oracle, worked DST examples and properties.

The oracle shares no code with ``tikk.schedules.spec`` and does not use croniter: it parses the
fields itself and walks the UTC timeline second by second (skipping whole local hours and
minutes that cannot match), reading the zone's offset from zoneinfo.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache, lru_cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tikk.errors import InvalidArgument
from tikk.schedules.cron import MACROS, parse_cron
from tikk.schedules.spec import (
    Occurrence,
    ScheduleSpec,
    fire_instant,
    format_local,
    jitter_offset_ms,
    next_fire,
    next_nominal,
    next_occurrence,
    preview,
    validate,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def ms(text: str) -> int:
    """A UTC ISO time (``2026-03-29T01:00``) in epoch milliseconds."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()) * 1000


NOW = ms("2026-01-01T00:00")


def chain(spec: ScheduleSpec, start_ms: int, end_ms: int) -> list[int]:
    """Nominal instants in [start_ms, end_ms), by walking next_nominal."""
    out: list[int] = []
    nominal = next_nominal(spec, start_ms - 1)
    while nominal is not None and nominal < end_ms:
        out.append(nominal)
        nominal = next_nominal(spec, nominal)
    return out


# --- the oracle ------------------------------------------------------------------------------

_ORACLE_MONTHS = (
    "jan",
    "feb",
    "mar",
    "apr",
    "may",
    "jun",
    "jul",
    "aug",
    "sep",
    "oct",
    "nov",
    "dec",
)
_ORACLE_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_ORACLE_NAMES = {
    **{name: i for i, name in enumerate(_ORACLE_MONTHS, 1)},
    **{name: i for i, name in enumerate(_ORACLE_WEEKDAYS)},
}
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()


def _oracle_number(text: str) -> int:
    return int(text) if text.isdigit() else _ORACLE_NAMES[text]


def _oracle_set(text: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.lower().split(","):
        base, _, step = part.partition("/")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, b = base.split("-")
            first, last = _oracle_number(a), _oracle_number(b)
        else:
            first = _oracle_number(base)
            last = high if step else first
        values.update(range(first, last + 1, int(step or "1")))
    return frozenset(values)


@dataclass(frozen=True)
class OracleCron:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    either_day: bool

    @staticmethod
    def parse(cron: str) -> OracleCron:
        fields = cron.split()
        if len(fields) == 5:
            fields = ["0", *fields]
        sec, minute, hour, dom, month, dow = fields
        weekdays = {0 if d == 7 else d for d in _oracle_set(dow, 0, 6)}
        return OracleCron(
            seconds=_oracle_set(sec, 0, 59),
            minutes=_oracle_set(minute, 0, 59),
            hours=_oracle_set(hour, 0, 23),
            days=_oracle_set(dom, 1, 31),
            months=_oracle_set(month, 1, 12),
            weekdays=frozenset(weekdays),
            either_day=not dom.startswith("*") and not dow.startswith("*"),
        )

    @cache  # noqa: B019 - a few hundred days per test, dropped with the test
    def day_matches(self, epoch_day: int) -> bool:
        d = date.fromordinal(_EPOCH_ORDINAL + epoch_day)
        by_day, by_weekday = d.day in self.days, d.isoweekday() % 7 in self.weekdays
        day_ok = (by_day or by_weekday) if self.either_day else (by_day and by_weekday)
        return d.month in self.months and day_ok

    def walls(self, lo: int, hi: int) -> Iterator[int]:
        """Matching wall-clock seconds in [lo, hi): every second of every hour that can match."""
        wall = lo
        while wall < hi:
            hour_end = min(hi, (wall // 3600 + 1) * 3600)
            if self.day_matches(wall // 86_400) and wall // 3600 % 24 in self.hours:
                while wall < hour_end:
                    minute_end = min(hour_end, (wall // 60 + 1) * 60)
                    if wall // 60 % 60 in self.minutes:
                        yield from (w for w in range(wall, minute_end) if w % 60 in self.seconds)
                    wall = minute_end
            wall = hour_end


def _offset_s(zone_name: str, instant_s: int) -> int:
    offset = datetime.fromtimestamp(instant_s, ZoneInfo(zone_name)).utcoffset()
    assert offset is not None
    return int(offset.total_seconds())


@lru_cache(maxsize=64)
def segments(zone_name: str, start_s: int, end_s: int) -> tuple[tuple[int, int, int], ...]:
    """Runs (utc_start, utc_end, offset) of constant UTC offset; transitions to the minute."""
    runs: list[tuple[int, int, int]] = []
    run_start, offset = start_s, _offset_s(zone_name, start_s)
    for sample in range(start_s + 900, end_s + 900, 900):
        if _offset_s(zone_name, sample) == offset:
            continue
        change = next(
            t for t in range(sample - 840, sample + 60, 60) if _offset_s(zone_name, t) != offset
        )
        runs.append((run_start, change, offset))
        run_start, offset = change, _offset_s(zone_name, change)
    runs.append((run_start, end_s, offset))
    return tuple(runs)


def oracle_fires(cron: str, zone_name: str, start_ms: int, end_ms: int) -> list[int]:
    """Fire instants (ms) in [start_ms, end_ms) by brute force over the UTC timeline.

    A UTC second fires when its wall time matches and the clock has never shown that wall time
    before (the first occurrence); wall times the clock jumps over fire, once, where it resumes.
    """
    spec = OracleCron.parse(cron)
    start_s, end_s = start_ms // 1000, end_ms // 1000
    runs = segments(zone_name, start_s - 2 * 86_400, end_s)
    fires: set[int] = set()
    shown_until = runs[0][0] + runs[0][2]  # the clock has shown every wall time below this
    for utc_start, utc_end, offset in runs:
        wall_start, wall_end = utc_start + offset, utc_end + offset
        skipped = spec.walls(shown_until, wall_start)
        if wall_start > shown_until and next(skipped, None) is not None:
            fires.add(utc_start)
        fresh = max(wall_start, shown_until)
        fires.update(wall - offset for wall in spec.walls(fresh, wall_end))
        shown_until = max(shown_until, wall_end)
    return sorted(f * 1000 for f in fires if start_s <= f < end_s)


# --- the oracle against next_nominal over whole years ----------------------------------------

ZONES = [
    "Europe/Oslo",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Asia/Tokyo",
    "UTC",
]
YEAR_CRONS = [
    "30 2 * * *",
    "0 * * * *",
    "*/15 1-3 * * *",
    "0,30 2,3 * * *",
    "0 9 * * 1-5",
    "0 0 29 2 *",
    "45 23 31 12 *",
    "0 0 1,15 * 5",
    "10 0 */2 * MON",
    "5-5 1 * * sat-7",
    "20/20 2 * JAN-MAR,oct-dec 1-7/2",
]


@pytest.mark.parametrize("zone_name", ZONES)
@pytest.mark.parametrize("cron", YEAR_CRONS)
def test_a_year_of_fires_matches_the_oracle(zone_name: str, cron: str) -> None:
    start, end = ms("2026-01-01T00:00"), ms("2027-01-01T00:00")
    spec = ScheduleSpec(cron=cron, timezone=zone_name)
    assert chain(spec, start, end) == oracle_fires(cron, zone_name, start, end)


LEAP_CRONS = ["0 0 29 2 *", "30 2 * * *", "*/15 1-3 * * *", "0 0 1,15 * 5"]


@pytest.mark.parametrize("year", [2024, 2028])
@pytest.mark.parametrize("zone_name", ["Europe/Oslo", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("cron", LEAP_CRONS)
def test_leap_years_match_the_oracle(year: int, zone_name: str, cron: str) -> None:
    start, end = ms(f"{year}-01-01T00:00"), ms(f"{year + 1}-01-01T00:00")
    spec = ScheduleSpec(cron=cron, timezone=zone_name)
    got = chain(spec, start, end)
    assert got == oracle_fires(cron, zone_name, start, end)
    if cron == "0 0 29 2 *":
        assert len(got) == 1


SECOND_WINDOWS = [
    ("Europe/Oslo", "2026-03-28T12:00", "2026-03-29T12:00"),
    ("Europe/Oslo", "2026-10-24T12:00", "2026-10-25T12:00"),
    ("Australia/Lord_Howe", "2026-04-04T12:00", "2026-04-05T12:00"),
    ("Australia/Lord_Howe", "2026-10-03T12:00", "2026-10-04T12:00"),
]
SECOND_CRONS = ["*/20 30 2 * * *", "*/20 * 2 * * *", "7,59 59 1 * * *", "0 0,30 1-3 * * *"]


@pytest.mark.parametrize(("zone_name", "start", "end"), SECOND_WINDOWS)
@pytest.mark.parametrize("cron", SECOND_CRONS)
def test_seconds_field_matches_the_oracle(zone_name: str, start: str, end: str, cron: str) -> None:
    spec = ScheduleSpec(cron=cron, timezone=zone_name)
    assert chain(spec, ms(start), ms(end)) == oracle_fires(cron, zone_name, ms(start), ms(end))


def test_the_oracle_sees_the_oslo_transitions() -> None:
    """Guards the oracle itself: it must find the jumps, or the comparisons prove nothing."""
    runs = segments("Europe/Oslo", ms("2026-01-01T00:00") // 1000, ms("2027-01-01T00:00") // 1000)
    assert [start for start, _, _ in runs[1:]] == [
        ms("2026-03-29T01:00") // 1000,
        ms("2026-10-25T01:00") // 1000,
    ]


# --- worked examples, Europe/Oslo 2026 -------------------------------------------------------


def oslo(cron: str) -> ScheduleSpec:
    return ScheduleSpec(cron=cron, timezone="Europe/Oslo")


def test_spring_forward_fires_a_skipped_time_once_when_the_clock_resumes() -> None:
    day = chain(oslo("30 2 * * *"), ms("2026-03-28T12:00"), ms("2026-03-30T12:00"))
    assert day == [ms("2026-03-29T01:00"), ms("2026-03-30T00:30")]
    assert format_local(day[0], "Europe/Oslo") == "2026-03-29 03:00:00+02:00 CEST"


def test_skipped_times_collapse_into_one_fire() -> None:
    window = (ms("2026-03-29T00:00"), ms("2026-03-29T03:00"))
    assert chain(oslo("*/15 2 * * *"), *window) == [ms("2026-03-29T01:00")]
    assert chain(oslo("0,30 2,3 * * *"), *window) == [
        ms("2026-03-29T01:00"),
        ms("2026-03-29T01:30"),
    ]


def test_fall_back_fires_a_repeated_time_at_its_first_occurrence() -> None:
    day = chain(oslo("30 2 * * *"), ms("2026-10-24T12:00"), ms("2026-10-26T12:00"))
    assert day == [ms("2026-10-25T00:30"), ms("2026-10-26T01:30")]
    assert format_local(day[0], "Europe/Oslo") == "2026-10-25 02:30:00+02:00 CEST"


def test_hourly_on_fall_back_leaves_a_two_hour_gap() -> None:
    fires = chain(oslo("0 * * * *"), ms("2026-10-24T22:30"), ms("2026-10-25T03:30"))
    assert fires == [
        ms("2026-10-24T23:00"),
        ms("2026-10-25T00:00"),
        ms("2026-10-25T02:00"),
        ms("2026-10-25T03:00"),
    ]
    assert [format_local(f, "Europe/Oslo")[11:] for f in fires[:3]] == [
        "01:00:00+02:00 CEST",
        "02:00:00+02:00 CEST",
        "03:00:00+01:00 CET",
    ]


def test_searching_from_the_second_pass_does_not_fire_again() -> None:
    second_pass = ms("2026-10-25T01:10")  # 02:10 CET, a wall time already seen at 00:10 UTC
    assert next_nominal(oslo("*/5 * * * *"), second_pass) == ms("2026-10-25T02:00")
    assert next_nominal(oslo("* * * * * *"), second_pass) == ms("2026-10-25T02:00")
    assert next_nominal(oslo("*/5 * * * *"), ms("2026-10-25T00:52")) == ms("2026-10-25T00:55")


def test_interval_schedules_follow_elapsed_time_across_dst() -> None:
    for day in ("2026-03-29", "2026-10-25"):
        spec = ScheduleSpec(interval_ms=HOUR_MS, timezone="Europe/Oslo")
        fires = chain(spec, ms(f"{day}T00:00"), ms(f"{day}T04:00"))
        assert fires == [ms(f"{day}T0{h}:00") for h in range(4)]


def test_interval_phase_offsets_from_the_epoch() -> None:
    spec = ScheduleSpec(interval_ms=HOUR_MS, phase_ms=15 * 60_000)
    assert next_nominal(spec, ms("2026-10-25T01:15")) == ms("2026-10-25T02:15")
    assert next_nominal(spec, ms("2026-10-25T01:14")) == ms("2026-10-25T01:15")
    assert next_nominal(ScheduleSpec(interval_ms=7_000, phase_ms=3_000), -1) == 3_000
    assert next_nominal(ScheduleSpec(interval_ms=7_000, phase_ms=3_000), -5_000) == -4_000


def test_zones_off_the_hour() -> None:
    kathmandu = ScheduleSpec(cron="0 9 * * *", timezone="Asia/Kathmandu")  # +05:45
    assert next_nominal(kathmandu, ms("2026-06-01T00:00")) == ms("2026-06-01T03:15")
    # Lord Howe springs forward half an hour, 02:00 -> 02:30, at 15:30 UTC.
    lord_howe = ScheduleSpec(cron="15 2 * * *", timezone="Australia/Lord_Howe")
    assert next_nominal(lord_howe, ms("2026-10-03T12:00")) == ms("2026-10-03T15:30")


# --- bounds, jitter, preview -----------------------------------------------------------------


def test_start_is_inclusive_and_end_bounds_the_nominal_instant() -> None:
    spec = ScheduleSpec(
        cron="0 * * * *", start_ms=ms("2026-01-01T03:00"), end_ms=ms("2026-01-01T05:00")
    )
    assert chain(spec, 0, ms("2027-01-01T00:00")) == [ms(f"2026-01-01T0{h}:00") for h in (3, 4, 5)]
    jittered = ScheduleSpec(cron="0 * * * *", end_ms=ms("2026-01-01T05:00"), jitter_ms=60_000)
    last = next_occurrence(jittered, ms("2026-01-01T04:00"), schedule_id="s")
    assert last is not None and last.nominal_ms == ms("2026-01-01T05:00")
    assert next_fire(jittered, ms("2026-01-01T05:00"), schedule_id="s") is None


def test_next_fire_adds_the_jitter_of_the_occurrence() -> None:
    spec = ScheduleSpec(cron="0 * * * *", jitter_ms=600_000)
    nominal = ms("2026-01-01T01:00")
    expected = nominal + jitter_offset_ms("sched-1", nominal, 600_000)
    assert next_fire(spec, ms("2026-01-01T00:30"), schedule_id="sched-1") == expected
    assert fire_instant(spec, nominal, schedule_id="sched-1") == expected


def test_jitter_spreads_schedules_apart() -> None:
    offsets = {jitter_offset_ms(f"sched-{i}", NOW, 1_000_000_000) for i in range(50)}
    assert len(offsets) == 50
    assert jitter_offset_ms("s", NOW, 0) == 0


def test_preview_bounds() -> None:
    spec = ScheduleSpec(cron="0 0 * * *", jitter_ms=1000)
    week = preview(spec, after_ms=NOW, count=7, schedule_id="s")
    assert [o.nominal_ms for o in week] == [NOW + d * DAY_MS for d in range(1, 8)]
    assert all(isinstance(o, Occurrence) and 0 <= o.fire_ms - o.nominal_ms < 1000 for o in week)
    until = preview(spec, after_ms=NOW, until_ms=NOW + 3 * DAY_MS, schedule_id="s")
    assert until == week[:3]
    assert (
        preview(spec, after_ms=NOW, count=2, until_ms=NOW + 9 * DAY_MS, schedule_id="s") == week[:2]
    )
    with pytest.raises(InvalidArgument) as info:
        preview(spec, after_ms=NOW, schedule_id="s")
    assert info.value.field == "count"


def test_format_local_shows_milliseconds_only_when_present() -> None:
    assert format_local(ms("2026-06-01T00:00") + 5, "UTC") == "2026-06-01 00:00:00.005+00:00 UTC"
    assert (
        format_local(ms("2026-06-01T00:00"), "Asia/Kathmandu") == "2026-06-01 05:45:00+05:45 +0545"
    )
    assert format_local(ms("2026-10-25T01:30"), "Europe/Oslo") == "2026-10-25 02:30:00+01:00 CET"


# --- syntax and macros -----------------------------------------------------------------------


@pytest.mark.parametrize("macro", sorted(MACROS))
def test_macros_equal_their_expansion(macro: str) -> None:
    start, end = ms("2025-12-01T00:00"), ms("2026-03-01T00:00")
    got = chain(oslo(macro), start, end)
    assert got and got == chain(oslo(MACROS[macro]), start, end)


def test_macro_meanings() -> None:
    assert (
        MACROS["@hourly"] == "0 * * * *" and MACROS["@daily"] == MACROS["@midnight"] == "0 0 * * *"
    )
    assert MACROS["@weekly"] == "0 0 * * 0" and MACROS["@monthly"] == "0 0 1 * *"
    assert MACROS["@yearly"] == MACROS["@annually"] == "0 0 1 1 *"
    assert next_nominal(ScheduleSpec(cron="@WEEKLY"), NOW) == ms("2026-01-04T00:00")  # a Sunday


def test_fields_where_croniter_would_differ() -> None:
    assert parse_cron("5-5 * * * *").minutes == (5,)  # croniter alone: every minute
    assert parse_cron("59/15 * * * *").minutes == (59,)
    assert parse_cron("0 0 * * 7").weekdays == {0}
    assert parse_cron("0 0 * * 5-7").weekdays == {0, 5, 6}
    assert parse_cron("0 0 * * mon/2").weekdays == {1, 3, 5}
    assert parse_cron("*/20 * * * * *").seconds == (0, 20, 40)


def test_day_of_month_and_week_combine_as_in_vixie_cron() -> None:
    either = chain(
        ScheduleSpec(cron="0 0 1,15 * 5"), ms("2026-05-01T00:00"), ms("2026-06-01T00:00")
    )
    assert [datetime.fromtimestamp(f // 1000, UTC).day for f in either] == [1, 8, 15, 22, 29]
    both = chain(ScheduleSpec(cron="0 0 */2 * 1"), ms("2026-05-01T00:00"), ms("2026-06-01T00:00"))
    assert [datetime.fromtimestamp(f // 1000, UTC).day for f in both] == [11, 25]


# --- validation ------------------------------------------------------------------------------

REFUSALS: list[tuple[dict[str, object], dict[str, int], str, str]] = [
    ({}, {}, "spec.cron", "exactly one of cron and interval_ms"),
    ({"cron": "* * * * *", "interval_ms": 60_000}, {}, "spec.cron", "not both"),
    (
        {"cron": "* * * * * * *"},
        {},
        "spec.cron",
        "expected 5 or 6 fields (seconds first when 6), got 7",
    ),
    ({"cron": "* * * *"}, {}, "spec.cron", "got 4"),
    ({"cron": "61 * * * *"}, {}, "spec.cron", "minute field: 61 is out of range 0-59"),
    ({"cron": "0 0 0 * *"}, {}, "spec.cron", "day-of-month field: 0 is out of range 1-31"),
    ({"cron": "0 0 30 2 *"}, {}, "spec.cron", "never fires"),
    ({"cron": "0 0 31 4,6,9,11 *"}, {}, "spec.cron", "never fires"),
    ({"cron": "@reboot"}, {}, "spec.cron", "unknown macro '@reboot'"),
    ({"cron": "0 0 L * *"}, {}, "spec.cron", "day-of-month field: 'l' is not a number"),
    ({"cron": "0 0 ? * *"}, {}, "spec.cron", "cannot read '?'"),
    ({"cron": "H * * * *"}, {}, "spec.cron", "minute field: 'h' is not a number"),
    ({"cron": "0 0 * * 1#2"}, {}, "spec.cron", "cannot read '1#2'"),
    ({"cron": "0 0 * * mon-sun"}, {}, "spec.cron", "runs backwards (Sunday may be written 7"),
    ({"cron": "0 22-2 * * *"}, {}, "spec.cron", "hour field: range '22-2' runs backwards"),
    ({"cron": "*/0 * * * *"}, {}, "spec.cron", "step in '*/0' must be at least 1"),
    ({"cron": "0 0 1,,2 * *"}, {}, "spec.cron", "cannot read ''"),
    ({"cron": "0 0 * foo *"}, {}, "spec.cron", "month field: 'foo' is not a number or a name"),
    (
        {"cron": "0 * * * *", "timezone": "Mars/Olympus"},
        {},
        "spec.timezone",
        "unknown time zone 'Mars/Olympus'",
    ),
    ({"interval_ms": 60_000, "timezone": ""}, {}, "spec.timezone", "unknown time zone ''"),
    (
        {"interval_ms": 500},
        {},
        "spec.interval_ms",
        "fires every 500 ms, below the minimum interval 1 s",
    ),
    ({"interval_ms": -5}, {}, "spec.interval_ms", "must be positive"),
    (
        {"cron": "* * * * *"},
        {"min_interval_ms": 120_000},
        "spec.cron",
        "fires every 1 min, below the minimum interval 2 min",
    ),
    ({"cron": "*/30 * * * * *"}, {"min_interval_ms": 60_000}, "spec.cron", "fires every 30 s"),
    ({"cron": "0 0,23 * * *"}, {"min_interval_ms": 2 * HOUR_MS}, "spec.cron", "fires every 1 h"),
    (
        {"cron": "* * * * *"},
        {"max_fires_per_day": 1000},
        "spec.cron",
        "fires 1440 times a day, above the ceiling of 1000",
    ),
    (
        {"interval_ms": 60_000},
        {"max_fires_per_day": 1000},
        "spec.interval_ms",
        "fires 1440 times a day",
    ),
    (
        {"interval_ms": 60_000, "start_ms": NOW, "end_ms": NOW - 1},
        {},
        "spec.end_ms",
        "is before start_ms",
    ),
    ({"interval_ms": 60_000, "end_ms": NOW - 1}, {}, "spec.end_ms", "no occurrence"),
    (
        {"cron": "0 0 * * *", "start_ms": NOW + 1, "end_ms": NOW + 3_600_000},
        {},
        "spec.end_ms",
        "no occurrence",
    ),
    ({"interval_ms": 60_000, "jitter_ms": -1}, {}, "spec.jitter_ms", "must not be negative"),
    (
        {"cron": "* * * * *", "jitter_ms": 60_000},
        {},
        "spec.jitter_ms",
        "below the minimal gap between fires (1 min)",
    ),
    ({"cron": "0 0,23 * * *", "jitter_ms": 2 * HOUR_MS}, {}, "spec.jitter_ms", "(1 h), got 2 h"),
    ({"interval_ms": HOUR_MS, "jitter_ms": HOUR_MS}, {}, "spec.jitter_ms", "(1 h)"),
    (
        {"interval_ms": HOUR_MS, "phase_ms": HOUR_MS},
        {},
        "spec.phase_ms",
        "must be in [0, interval_ms)",
    ),
    ({"interval_ms": HOUR_MS, "phase_ms": -1}, {}, "spec.phase_ms", "got -1"),
    ({"cron": "0 * * * *", "phase_ms": 5}, {}, "spec.phase_ms", "interval schedules only"),
    ({"interval_ms": HOUR_MS, "max_runs": 0}, {}, "spec.max_runs", "must be at least 1, got 0"),
]


@pytest.mark.parametrize(("fields", "limits", "field", "reason"), REFUSALS)
def test_validate_refuses(
    fields: dict[str, object], limits: dict[str, int], field: str, reason: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate(ScheduleSpec(**fields), now_ms=NOW, **limits)  # type: ignore[arg-type]
    assert info.value.field == field
    assert reason in info.value.reason


@pytest.mark.parametrize(
    "spec",
    [
        ScheduleSpec(cron="* * * * * *"),  # every second passes the default 1 s minimum
        ScheduleSpec(interval_ms=1000),
        ScheduleSpec(cron="0 0 29 2 *", timezone="Asia/Tokyo", jitter_ms=DAY_MS),
        ScheduleSpec(cron="0 0 * * 1", jitter_ms=6 * DAY_MS, max_runs=3),
        ScheduleSpec(interval_ms=HOUR_MS, phase_ms=HOUR_MS - 1, jitter_ms=HOUR_MS - 1),
        ScheduleSpec(cron="@Daily", start_ms=NOW + DAY_MS, end_ms=NOW + DAY_MS),
    ],
)
def test_validate_accepts(spec: ScheduleSpec) -> None:
    assert validate(spec, now_ms=NOW) == spec


def test_validate_normalizes_spacing() -> None:
    assert validate(ScheduleSpec(cron="  0   9 * *\t1-5 "), now_ms=NOW).cron == "0 9 * * 1-5"


def test_february_29_across_2100_is_found() -> None:
    spec = ScheduleSpec(cron="0 0 29 2 *")
    assert validate(spec, now_ms=ms("2096-03-01T00:00")) == spec
    assert next_nominal(spec, ms("2096-03-01T00:00")) == ms("2104-02-29T00:00")


# --- properties ------------------------------------------------------------------------------

PROPERTY_CRONS = [
    "30 2 * * *",
    "0 * * * *",
    "*/15 1-3 * * *",
    "0,30 2,3 * * *",
    "*/7 * * * *",
    "0 9 * * 1-5",
    "0 0 1,15 * 5",
    "0 0 29 2 *",
    "*/20 30 2 * * *",
    "13 */5 2 * * *",
]
crons = st.builds(
    ScheduleSpec,
    cron=st.sampled_from(PROPERTY_CRONS),
    timezone=st.sampled_from(ZONES),
    jitter_ms=st.sampled_from([0, 999]),
)
intervals = st.integers(1000, 3 * DAY_MS).flatmap(
    lambda i: st.builds(ScheduleSpec, interval_ms=st.just(i), phase_ms=st.integers(0, i - 1))
)
specs = st.one_of(crons, intervals)
instants = st.integers(ms("2020-01-01T00:00"), ms("2035-01-01T00:00"))


@given(spec=specs, after=instants)
@settings(deadline=None)
def test_next_is_strictly_after(spec: ScheduleSpec, after: int) -> None:
    nominal = next_nominal(spec, after)
    assert nominal is not None and nominal > after
    fire = next_fire(spec, after, schedule_id="s")
    assert fire is not None and nominal <= fire < nominal + max(1, spec.jitter_ms)


@given(spec=specs, after=instants, count=st.integers(0, 12))
@settings(deadline=None)
def test_preview_is_the_next_nominal_chain(spec: ScheduleSpec, after: int, count: int) -> None:
    previewed = preview(spec, after_ms=after, count=count, schedule_id="s")
    expected: list[int] = []
    nominal = after
    for _ in range(count):
        found = next_nominal(spec, nominal)
        assert found is not None
        expected.append(nominal := found)
    assert [o.nominal_ms for o in previewed] == expected
    assert [o.fire_ms for o in previewed] == [
        fire_instant(spec, n, schedule_id="s") for n in expected
    ]


@given(spec=specs, after=instants, data=st.data())
@settings(deadline=None)
def test_every_instant_before_the_next_leads_to_it(
    spec: ScheduleSpec, after: int, data: st.DataObject
) -> None:
    first = next_nominal(spec, after)
    assert first is not None
    second = next_nominal(spec, first)
    assert second is not None and second > first
    assert next_nominal(spec, data.draw(st.integers(after, first - 1))) == first
    assert next_nominal(spec, data.draw(st.integers(first, second - 1))) == second


@given(schedule_id=st.text(max_size=40), nominal=instants, jitter=st.integers(1, 10**9))
def test_jitter_is_stable_and_in_range(schedule_id: str, nominal: int, jitter: int) -> None:
    offset = jitter_offset_ms(schedule_id, nominal, jitter)
    assert 0 <= offset < jitter
    assert jitter_offset_ms(schedule_id, nominal, jitter) == offset


@given(spec=crons, after=instants)
@settings(deadline=None)
def test_fires_are_whole_seconds_and_bounds_hold(spec: ScheduleSpec, after: int) -> None:
    bounded = ScheduleSpec(
        cron=spec.cron, timezone=spec.timezone, start_ms=after, end_ms=after + 30 * DAY_MS
    )
    for nominal in chain(bounded, after - DAY_MS, after + 40 * DAY_MS):
        assert nominal % 1000 == 0 and after <= nominal <= after + 30 * DAY_MS


def test_a_week_of_five_minute_fires_across_fall_back() -> None:
    spec = oslo("*/5 * * * *")
    fires = chain(spec, ms("2026-10-24T00:00"), ms("2026-10-31T00:00"))
    assert len(fires) == 7 * 288 - 12  # the repeated hour fires once
