"""When a recurring schedule fires: cron or fixed-interval specs, evaluated from a given instant.

Expressions are read by ``tikk.schedules.cron`` (which wraps croniter, for expanding fields only).
The search for the next instant and the mapping from wall-clock time to UTC are done here: that
is where cron libraries have had their daylight-saving bugs (croniter 7.0.0 fires a repeated
fall-back time twice), and the rule below must hold exactly. No function reads the clock;
``now_ms`` and ``after_ms`` are passed in.

Daylight saving time
--------------------
Cron fields are matched against the local wall-clock time of the spec's ``timezone``. Each
matching wall-clock time fires once, at the first instant the zone's clock shows that time or a
later one. So:

* a wall time skipped on a spring-forward day fires once, at the end of the gap (the transition
  instant); all the skipped times collapse into that one fire, together with the first time
  after the gap if it matches too;
* a wall time that occurs twice on a fall-back day fires once, at its first occurrence.

Worked example, Europe/Oslo, 2026:

* 29 March, 02:00 CET becomes 03:00 CEST at 01:00 UTC. ``30 2 * * *`` fires once, at 03:00 CEST
  = 01:00 UTC. ``*/15 2 * * *`` (02:00, 02:15, 02:30, 02:45: none exists) fires once at 01:00 UTC,
  and ``0,30 2,3 * * *`` fires at 01:00 UTC (03:00 CEST) and 01:30 UTC (03:30 CEST), nothing else.
* 25 October, 03:00 CEST becomes 02:00 CET at 01:00 UTC, so 02:00-02:59 happen twice.
  ``30 2 * * *`` fires once, at 02:30 CEST = 00:30 UTC. ``0 * * * *`` fires at 01:00 CEST,
  02:00 CEST and 03:00 CET, i.e. 23:00, 00:00 and 02:00 UTC: two hours pass between the last two,
  because 02:00 CET repeats a wall time that has already fired. Likewise ``*/5 * * * *`` fires
  through the first pass of 02:00-02:55 and is then silent for an hour.

Interval schedules follow elapsed time, never the wall clock: they fire at the instants ``t``
with ``(t - phase_ms) % interval_ms == 0`` (UTC milliseconds; epoch-aligned plus the phase).

Occurrences
-----------
An occurrence is identified by ``(schedule_id, nominal_ms)``. The nominal instant is what the
rules above yield; "strictly after", ``start_ms`` and ``end_ms`` are compared with it. The fire
instant is ``nominal_ms`` plus a jitter in ``[0, jitter_ms)`` hashed from the identity, so every
node recomputes the same instant. The chain of occurrences is ``next_nominal(spec, previous)``,
and ``preview`` is exactly that chain.

``validate`` measures the minimal gap and the fires per day in wall-clock time. On a
spring-forward day two fires can be closer in elapsed time (by at most the size of the jump),
never closer than one second.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tikk.errors import InvalidArgument
from tikk.schedules.cron import CronFields, cron_error, parse_cron
from tikk.text_rules import quoted

# Any satisfiable expression fires within 8 years: the longest gap is 29 February around 2100
# (2096-02-29 to 2104-02-29, 2921 days).
SEARCH_DAYS = 8 * 366

_MS = 1000
_DAY_S = 86_400
_DAY_MS = _DAY_S * _MS
_ONE_DAY = timedelta(days=1)
_ONE_SECOND = timedelta(seconds=1)
# The search stops short of date.max so stepping a day or a month never overflows.
_LAST_SEARCH_DAY = date(9999, 11, 30).toordinal()
# Occurrences lie in [_EARLIEST_MS, _LATEST_MS]: a day inside the years 1-9999 that datetime
# and google.protobuf.Timestamp hold, so every zone's wall clock can show them.
_EARLIEST_MS = int(datetime(1, 1, 2, tzinfo=UTC).timestamp()) * _MS
_LATEST_MS = int(datetime(9999, 12, 30, tzinfo=UTC).timestamp()) * _MS


@dataclass(frozen=True)
class ScheduleSpec:
    """When a recurring schedule fires; set exactly one of ``cron`` and ``interval_ms``.

    ``start_ms`` and ``end_ms`` bound the nominal instants, both inclusive. ``max_runs`` caps the
    number of occurrences; counting them is the caller's job, as only it knows how many ran.
    ``phase_ms`` applies to interval schedules only.
    """

    cron: str = ""
    interval_ms: int = 0
    phase_ms: int = 0
    timezone: str = "UTC"
    start_ms: int | None = None
    end_ms: int | None = None
    max_runs: int | None = None
    jitter_ms: int = 0


@dataclass(frozen=True)
class Occurrence:
    """One occurrence, identified by (schedule id, ``nominal_ms``); it runs at ``fire_ms``."""

    nominal_ms: int
    fire_ms: int


def time_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; raises ``InvalidArgument`` on ``spec.timezone`` if unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # OSError: a name the file system refuses as a path (too long, say) is no zone either.
        raise InvalidArgument("spec.timezone", f"unknown time zone {quoted(name)}") from exc


# --- wall clock to UTC -----------------------------------------------------------------------


def _offset_change(lo_s: int, hi_s: int, tz: ZoneInfo) -> int:
    """The first instant in ``(lo_s, hi_s]`` already on the UTC offset that ``hi_s`` has."""
    target = datetime.fromtimestamp(hi_s, tz).utcoffset()
    while hi_s - lo_s > 1:
        mid = (lo_s + hi_s) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == target:
            hi_s = mid
        else:
            lo_s = mid
    return hi_s


def _instant_of(wall: datetime, tz: ZoneInfo) -> int:
    """The first instant (s) the zone's clock shows ``wall`` or later: the DST rule, in one place.

    fold=0 is the first of a repeated time. A skipped time fails the round trip; it fires when
    the clock resumes, between the readings with the offsets before and after the jump.
    """
    instant = int(wall.replace(tzinfo=tz, fold=0).timestamp())
    if datetime.fromtimestamp(instant, tz).replace(tzinfo=None) == wall:
        return instant
    before_gap = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    return _offset_change(before_gap, instant, tz)


def _search_start(after_s: int, tz: ZoneInfo) -> datetime:
    """The earliest wall-clock time that can still fire after ``after_s``.

    Earlier candidates would be skipped anyway, as they map to instants up to ``after_s``;
    starting here spares walking them, up to an hour of every-second candidates.
    """
    local = datetime.fromtimestamp(after_s, tz)
    if not local.fold:
        return local.replace(tzinfo=None)
    # In the second pass of a repeated hour every wall time up to the end of the repeat has
    # fired in the first pass already: resume where the first pass ended.
    first_pass = int(local.replace(fold=0).timestamp())
    transition = _offset_change(first_pass, after_s, tz)
    end_of_first_pass = datetime.fromtimestamp(transition - 1, tz)
    return end_of_first_pass.replace(tzinfo=None, fold=0) + _ONE_SECOND


def _walls_from(fields: CronFields, start: datetime) -> Iterator[datetime]:
    """Matching wall-clock times at or after ``start``, ascending, for ``SEARCH_DAYS`` days."""
    day = start.date()
    last = date.fromordinal(min(day.toordinal() + SEARCH_DAYS, _LAST_SEARCH_DAY))
    clock = (start.hour, start.minute, start.second)
    while day <= last:
        if day.month not in fields.months:
            day, clock = date(day.year + day.month // 12, day.month % 12 + 1, 1), (0, 0, 0)
            continue
        if fields.matches_day(day):
            for h, m, s in fields.times_from(*clock):
                yield datetime(day.year, day.month, day.day, h, m, s)
        day, clock = day + _ONE_DAY, (0, 0, 0)


def _next_cron(spec: ScheduleSpec, after_ms: int) -> int | None:
    fields, tz = parse_cron(spec.cron), time_zone(spec.timezone)
    for wall in _walls_from(fields, _search_start(after_ms // _MS, tz)):
        instant_ms = _instant_of(wall, tz) * _MS
        if instant_ms > after_ms:
            return instant_ms
    return None


def _next_interval(spec: ScheduleSpec, after_ms: int) -> int:
    periods = (after_ms - spec.phase_ms) // spec.interval_ms + 1
    return spec.phase_ms + periods * spec.interval_ms


# --- occurrences -----------------------------------------------------------------------------


def next_nominal(spec: ScheduleSpec, after_ms: int) -> int | None:
    """The first nominal instant strictly after ``after_ms`` within the bounds, or None.

    None also when nothing fires within ``SEARCH_DAYS`` (only for specs ``validate`` refuses).
    Calling it again with the result walks the chain of occurrences. Nothing occurs outside
    the years 1-9999 (see ``_EARLIEST_MS``).
    """
    after_ms = max(after_ms, _EARLIEST_MS - 1)
    if spec.start_ms is not None:
        after_ms = max(after_ms, spec.start_ms - 1)
    if after_ms >= _LATEST_MS:
        return None
    nominal = _next_cron(spec, after_ms) if spec.cron else _next_interval(spec, after_ms)
    if nominal is None or nominal > _LATEST_MS:
        return None
    if spec.end_ms is not None and nominal > spec.end_ms:
        return None
    return nominal


def jitter_offset_ms(schedule_id: str, nominal_ms: int, jitter_ms: int) -> int:
    """A stable offset in ``[0, jitter_ms)`` for the occurrence ``(schedule_id, nominal_ms)``.

    A hash rather than a random draw, so that a recomputation (after a restart, on another node)
    lands on the same instant, while schedules sharing a cron line spread out.
    """
    if jitter_ms <= 0:
        return 0
    key = f"{schedule_id}@{nominal_ms}".encode()
    digest = hashlib.blake2b(key, digest_size=8, person=b"tikk.jitter").digest()
    return int.from_bytes(digest, "big") % jitter_ms


def fire_instant(spec: ScheduleSpec, nominal_ms: int, *, schedule_id: str) -> int:
    """When the occurrence ``(schedule_id, nominal_ms)`` runs: its nominal instant plus jitter."""
    return nominal_ms + jitter_offset_ms(schedule_id, nominal_ms, spec.jitter_ms)


def next_occurrence(spec: ScheduleSpec, after_ms: int, *, schedule_id: str) -> Occurrence | None:
    """The first occurrence whose nominal instant is strictly after ``after_ms``, or None."""
    nominal = next_nominal(spec, after_ms)
    if nominal is None:
        return None
    return Occurrence(nominal, fire_instant(spec, nominal, schedule_id=schedule_id))


def next_fire(spec: ScheduleSpec, after_ms: int, *, schedule_id: str) -> int | None:
    """The fire instant of ``next_occurrence``; "after" is compared with nominal instants.

    Pass the previous *nominal* instant to continue a chain: fire instants are jittered and do
    not identify occurrences.
    """
    occurrence = next_occurrence(spec, after_ms, schedule_id=schedule_id)
    return None if occurrence is None else occurrence.fire_ms


def occurrences(spec: ScheduleSpec, *, after_ms: int, schedule_id: str) -> Iterator[Occurrence]:
    """The occurrences after ``after_ms``, in order: the ``next_nominal`` chain, lazily."""
    nominal = next_nominal(spec, after_ms)
    while nominal is not None:
        yield Occurrence(nominal, fire_instant(spec, nominal, schedule_id=schedule_id))
        nominal = next_nominal(spec, nominal)


def preview(
    spec: ScheduleSpec,
    *,
    after_ms: int,
    schedule_id: str,
    count: int | None = None,
    until_ms: int | None = None,
) -> list[Occurrence]:
    """The next ``count`` occurrences, and/or those with nominal instants up to ``until_ms``.

    At least one of the two bounds is required, as a dense schedule never runs out. The result
    is the same chain the dispatcher walks with ``next_nominal``.
    """
    if count is None and until_ms is None:
        raise InvalidArgument("count", "give count, until_ms or both")
    if count is not None and count < 0:
        raise InvalidArgument("count", f"must not be negative, got {count}")
    chain = occurrences(spec, after_ms=after_ms, schedule_id=schedule_id)
    if until_ms is not None:
        chain = itertools.takewhile(lambda o: o.nominal_ms <= until_ms, chain)
    return list(itertools.islice(chain, count))


def format_local(instant_ms: int, timezone: str) -> str:
    """``instant_ms`` on the zone's wall clock, e.g. ``2026-03-29 03:00:00+02:00 CEST``.

    The offset and abbreviation are shown because around a DST change the wall time alone is
    ambiguous; milliseconds only when there are any.
    """
    local = datetime.fromtimestamp(instant_ms // _MS, time_zone(timezone))
    local = local.replace(microsecond=instant_ms % _MS * 1000)
    timespec = "milliseconds" if instant_ms % _MS else "seconds"
    return f"{local.isoformat(sep=' ', timespec=timespec)} {local.tzname()}"


# --- validation ------------------------------------------------------------------------------


def validate(
    spec: ScheduleSpec,
    *,
    now_ms: int,
    min_interval_ms: int = 1000,
    max_fires_per_day: int = 86_400,
) -> ScheduleSpec:
    """Refuse a spec that cannot be run as meant; returns it with the cron's spacing normalized.

    Each refusal is an ``InvalidArgument`` naming the ``spec.*`` field and what is wrong with it.
    """
    _check_kind(spec)
    tz = time_zone(spec.timezone)
    _check_bounds(spec)
    if spec.cron:
        spec = replace(spec, cron=" ".join(spec.cron.split()))
        gap_ms, per_day = _cron_cadence(spec, _first_local_day(spec, now_ms, tz))
    else:
        gap_ms, per_day = _interval_cadence(spec)
    field = "spec.cron" if spec.cron else "spec.interval_ms"
    if gap_ms < min_interval_ms:
        raise InvalidArgument(
            field,
            f"fires every {_duration(gap_ms)}, below the minimum interval "
            f"{_duration(min_interval_ms)}",
        )
    if per_day > max_fires_per_day:
        raise InvalidArgument(
            field, f"fires {per_day} times a day, above the ceiling of {max_fires_per_day}"
        )
    _check_jitter(spec.jitter_ms, gap_ms)
    _check_occurs(spec, now_ms)
    return spec


def _check_kind(spec: ScheduleSpec) -> None:
    if spec.cron and spec.interval_ms:
        raise InvalidArgument("spec.cron", "set exactly one of cron and interval_ms, not both")
    if not spec.cron.strip() and not spec.interval_ms:
        raise InvalidArgument("spec.cron", "set exactly one of cron and interval_ms")


def _check_bounds(spec: ScheduleSpec) -> None:
    if spec.max_runs is not None and spec.max_runs < 1:
        raise InvalidArgument("spec.max_runs", f"must be at least 1, got {spec.max_runs}")
    if spec.start_ms is not None and spec.end_ms is not None and spec.end_ms < spec.start_ms:
        raise InvalidArgument(
            "spec.end_ms", f"is before start_ms ({spec.end_ms} < {spec.start_ms})"
        )


def _first_local_day(spec: ScheduleSpec, now_ms: int, tz: ZoneInfo) -> date:
    start_ms = now_ms if spec.start_ms is None else max(now_ms, spec.start_ms)
    start_ms = min(max(start_ms, _EARLIEST_MS), _LATEST_MS)  # a day any zone can show
    return datetime.fromtimestamp(start_ms // _MS, tz).date()


def _cron_cadence(spec: ScheduleSpec, first_day: date) -> tuple[int, int]:
    """(minimal gap between fires in ms, fires per day), in wall-clock time."""
    if spec.phase_ms:
        raise InvalidArgument("spec.phase_ms", "applies to interval schedules only; must be 0")
    fields = parse_cron(spec.cron)
    days = _matching_days(fields, first_day)
    if not days:
        raise cron_error(
            f"never fires (no matching day within {SEARCH_DAYS // 366} years; e.g. 30 February)"
        )
    times = fields.seconds_of_day()
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if len(days) > 1:
        day_gap = min(b - a for a, b in itertools.pairwise(days))
        gaps.append(day_gap * _DAY_S - times[-1] + times[0])
    return min(gaps, default=SEARCH_DAYS * _DAY_S) * _MS, len(times)


def _matching_days(fields: CronFields, first_day: date) -> list[int]:
    """Ordinals of the matching days in the search window starting at ``first_day``."""
    first = first_day.toordinal()
    last = min(first + SEARCH_DAYS, _LAST_SEARCH_DAY)
    return [n for n in range(first, last + 1) if fields.matches_day(date.fromordinal(n))]


def _interval_cadence(spec: ScheduleSpec) -> tuple[int, int]:
    if spec.interval_ms < 0:
        raise InvalidArgument("spec.interval_ms", f"must be positive, got {spec.interval_ms}")
    if not 0 <= spec.phase_ms < spec.interval_ms:
        raise InvalidArgument(
            "spec.phase_ms",
            f"must be in [0, interval_ms) = [0, {spec.interval_ms}), got {spec.phase_ms}",
        )
    return spec.interval_ms, -(-_DAY_MS // spec.interval_ms)


def _check_jitter(jitter_ms: int, gap_ms: int) -> None:
    if jitter_ms < 0:
        raise InvalidArgument("spec.jitter_ms", f"must not be negative, got {jitter_ms}")
    if jitter_ms >= gap_ms:
        raise InvalidArgument(
            "spec.jitter_ms",
            f"must be below the minimal gap between fires ({_duration(gap_ms)}), "
            f"got {_duration(jitter_ms)}",
        )


def _check_occurs(spec: ScheduleSpec, now_ms: int) -> None:
    if next_nominal(spec, now_ms - 1) is not None:
        return
    if spec.end_ms is not None:
        raise InvalidArgument("spec.end_ms", "no occurrence between now (or start_ms) and end_ms")
    raise cron_error(f"never fires within {SEARCH_DAYS // 366} years of now (or start_ms)")


def _duration(ms: int) -> str:
    """``ms`` in the largest unit that divides it, for reasons people read."""
    for unit_ms, unit in ((_DAY_MS, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")):
        if ms and ms % unit_ms == 0:
            return f"{ms // unit_ms} {unit}"
    return f"{ms} ms"
