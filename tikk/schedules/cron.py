"""Cron syntax: the one module that reads cron expressions, wrapping ``croniter``.

Five fields ``minute hour day-of-month month day-of-week``, or six with the seconds FIRST
(``second minute hour day-of-month month day-of-week``), or a macro: ``@yearly``/``@annually``,
``@monthly``, ``@weekly``, ``@daily``/``@midnight``, ``@hourly``. A field is a comma-separated list
of ``*``, ``N`` or ``A-B``, each with an optional step ``/S``; ``N/S`` means ``N-max/S``. Months and
days of the week also take English three-letter names (``JAN``, ``MON``); Sunday is 0 or 7.
Nothing else is accepted (no ``L``, ``W``, ``#``, ``?``, ``H``, ``R``, year field, or ranges that
wrap around such as ``22-2``), so every expression means the same thing in any cron.

Day of month and day of week combine as in Vixie cron: when both are restricted, a day matches
if EITHER matches (``0 0 1,15 * FRI`` fires on the 1st, the 15th and every Friday). A day field
counts as unrestricted when it starts with ``*``, so ``0 0 */2 * MON`` fires on Mondays that fall
on an odd day of the month.

croniter (a dependency of tikk) only expands checked fields into value sets; the rest of tikk
asks ``parse_cron`` and never imports a cron library, so the library can be swapped.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from typing import Any

from croniter import CroniterError, croniter  # type: ignore[import-untyped]

from tikk.errors import InvalidArgument
from tikk.text_rules import quoted

MACROS: Mapping[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# Characters of an expression: far more than any useful one (every value of every field listed
# is about 530), and few enough that no number in it is too long for ``int``.
MAX_CRON_LENGTH = 1_000

_ELEMENT = re.compile(
    r"(?:\*|(?P<low>[0-9a-z]+)(?:-(?P<high>[0-9a-z]+))?)(?:/(?P<step>[0-9]+))?", re.ASCII
)


@dataclass(frozen=True)
class _FieldSyntax:
    name: str
    low: int
    high: int  # the top of the cycle
    top: int  # the largest value that may be written (day of week: 7, Sunday again)
    names: Mapping[str, int]


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_FIELDS = (
    _FieldSyntax("second", 0, 59, 59, {}),
    _FieldSyntax("minute", 0, 59, 59, {}),
    _FieldSyntax("hour", 0, 23, 23, {}),
    _FieldSyntax("day-of-month", 1, 31, 31, {}),
    _FieldSyntax("month", 1, 12, 12, {name: i for i, name in enumerate(_MONTHS, 1)}),
    _FieldSyntax("day-of-week", 0, 6, 7, {name: i for i, name in enumerate(_WEEKDAYS)}),
)


@dataclass(frozen=True)
class CronFields:
    """A parsed cron expression: the values each field allows; ``weekdays`` has 0 for Sunday."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    # Both day fields are restricted: a day matches if either does (Vixie cron).
    days_or_weekdays: bool

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_days = day.day in self.days
        in_weekdays = day.isoweekday() % 7 in self.weekdays
        if self.days_or_weekdays:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def times_from(self, hour: int, minute: int, second: int) -> Iterator[tuple[int, int, int]]:
        """The matching times of day at or after ``hour:minute:second``, in order."""
        for h in self.hours[bisect_left(self.hours, hour) :]:
            minutes = (
                self.minutes if h > hour else self.minutes[bisect_left(self.minutes, minute) :]
            )
            for m in minutes:
                later = (h, m) > (hour, minute)
                seconds = (
                    self.seconds if later else self.seconds[bisect_left(self.seconds, second) :]
                )
                for s in seconds:
                    yield h, m, s

    def seconds_of_day(self) -> list[int]:
        """Every matching time of day, as seconds after midnight, ascending."""
        return [h * 3600 + m * 60 + s for h, m, s in self.times_from(0, 0, 0)]


# --- parsing ---------------------------------------------------------------------------------


def cron_error(reason: str) -> InvalidArgument:
    return InvalidArgument("spec.cron", reason)


@lru_cache(maxsize=4096)
def parse_cron(cron: str) -> CronFields:
    """Parse ``cron``; raises ``InvalidArgument`` on ``spec.cron`` saying what is wrong.

    Cached by expression: the result is immutable, and the time zone plays no part in it.
    """
    texts = _field_texts(cron)
    normalized = [_normalize_field(t, syntax) for t, syntax in zip(texts, _FIELDS, strict=True)]
    seconds, minutes, hours, days, months, weekdays = _expand(" ".join(normalized))
    return CronFields(
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(weekdays),
        days_or_weekdays=not texts[3].startswith("*") and not texts[5].startswith("*"),
    )


def _field_texts(cron: str) -> list[str]:
    """The six fields, seconds first (``0`` for a five-field expression); macros resolved."""
    if len(cron) > MAX_CRON_LENGTH:
        raise cron_error(f"longer than {MAX_CRON_LENGTH:,} characters: {len(cron):,}")
    text = cron.strip()
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise cron_error(f"unknown macro {quoted(text)}; expected one of {', '.join(MACROS)}")
        text = MACROS[text.lower()]
    fields = text.lower().split()
    if len(fields) not in (5, 6):
        raise cron_error(
            f"expected 5 or 6 fields (seconds first when 6), got {len(fields)}"
            if fields
            else "is empty; expected 5 or 6 fields"
        )
    return fields if len(fields) == 6 else ["0", *fields]


def _normalize_field(text: str, syntax: _FieldSyntax) -> str:
    return ",".join(_normalize_element(element, syntax) for element in text.split(","))


def _normalize_element(element: str, syntax: _FieldSyntax) -> str:
    """Check one list element and spell it out with numbers only.

    Spelling it out also steers around croniter quirks: it widens an equal range such as
    ``5-5`` to the whole field, and it wraps reversed ranges around instead of refusing them.
    """
    match = _ELEMENT.fullmatch(element)
    if match is None:
        raise cron_error(
            f"{syntax.name} field: cannot read {quoted(element)} (use *, N, A-B, a step /S "
            "and lists)"
        )
    step = int(match["step"] or 1)
    if step < 1:
        raise cron_error(f"{syntax.name} field: step in {quoted(element)} must be at least 1")
    if match["low"] is None:
        return element
    low = _field_value(match["low"], syntax)
    if match["high"] is None:
        high = syntax.high if match["step"] else low
    else:
        high = _field_value(match["high"], syntax)
        if high < low:
            raise cron_error(_backwards(element, syntax))
    return str(low) if low >= high else f"{low}-{high}/{step}"


def _backwards(element: str, syntax: _FieldSyntax) -> str:
    hint = " (Sunday may be written 7 to end a range)" if syntax.top > syntax.high else ""
    return f"{syntax.name} field: range {quoted(element)} runs backwards{hint}"


def _field_value(text: str, syntax: _FieldSyntax) -> int:
    if text.isdigit():
        value = int(text)
        if not syntax.low <= value <= syntax.top:
            raise cron_error(
                f"{syntax.name} field: {value} is out of range {syntax.low}-{syntax.top}"
            )
        return value
    if text not in syntax.names:
        kind = "a number or a name" if syntax.names else "a number"
        raise cron_error(f"{syntax.name} field: {quoted(text)} is not {kind}")
    return syntax.names[text]


def _expand(expression: str) -> list[tuple[int, ...]]:
    """Expand a checked six-field expression (seconds first) into sorted value tuples."""
    try:
        expanded, _ = croniter.expand(expression, second_at_beginning=True)
    except CroniterError as exc:
        raise cron_error(f"not a valid cron expression: {exc}") from exc
    # croniter moves the seconds to the end: minute, hour, day, month, weekday, second.
    ordered = [expanded[5], *expanded[:5]]
    return [_values(values, syntax) for values, syntax in zip(ordered, _FIELDS, strict=True)]


def _values(values: Sequence[Any], syntax: _FieldSyntax) -> tuple[int, ...]:
    # croniter keeps "*" for a whole field, also inside a list ("*,*/2", "*,5"): all values.
    if "*" in values:
        return tuple(range(syntax.low, syntax.high + 1))
    # Day of week 7 is Sunday, 0; croniter folds it already, this keeps it so.
    return tuple(sorted({v if v <= syntax.high else syntax.low for v in map(int, values)}))
