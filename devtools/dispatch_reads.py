"""Store reads per second of a dispatcher, from the running totals it logs (``tikk.dispatcher``
at INFO: ``store reads at <ms> ms: <reads> reads, <rows> rows``; see ``dispatcher.scanner``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"store reads at (\d+) ms: (\d+) reads, (\d+) rows")


@dataclass(frozen=True)
class ReadTotals:
    """The totals a dispatcher had reached at ``at_ms`` (its clock)."""

    at_ms: int
    reads: int
    rows: int


@dataclass(frozen=True)
class ReadRate:
    reads_per_s: float
    rows_per_s: float
    # The window the rate was taken over: the logged totals that bracket the asked one.
    from_ms: int
    to_ms: int


def totals(log_text: str) -> list[ReadTotals]:
    """Every logged total, in the order logged."""
    return [ReadTotals(*map(int, m.groups())) for m in _LINE.finditer(log_text)]


def rate_between(points: list[ReadTotals], start_ms: int, end_ms: int) -> ReadRate | None:
    """The read rate over the smallest logged window that covers ``start_ms``..``end_ms``
    (or as much of it as was logged); None with fewer than two totals."""
    if len(points) < 2:
        return None
    before = [p for p in points if p.at_ms <= start_ms]
    after = [p for p in points if p.at_ms >= end_ms]
    first = before[-1] if before else points[0]
    last = after[0] if after else points[-1]
    if last.at_ms <= first.at_ms:
        return None
    seconds = (last.at_ms - first.at_ms) / 1000
    return ReadRate(
        (last.reads - first.reads) / seconds,
        (last.rows - first.rows) / seconds,
        first.at_ms,
        last.at_ms,
    )
