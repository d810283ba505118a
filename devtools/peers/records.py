"""What every handler records, and what the runner counts from it.

A handler appends ``<task id> <due → start ms>`` to a file of its own process
(``runs-<pid>.txt`` in ``$TIKK_PEERS_RECORDS``), one ``write`` per line, so processes never
interleave. tikk's worker (``devtools.bench_worker``) writes the same two fields first, then
one more the runner ignores. Lateness, lost tasks and duplicates are counted by task id.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from devtools.bench_report import percentile

RECORDS_ENV = "TIKK_PEERS_RECORDS"
_open: dict[int, int] = {}  # pid → descriptor: a forked child opens a file of its own


def record(task_id: str, due_ms: int) -> None:
    """The no-op handler of every peer: note ``task_id`` started now, this late after due."""
    started_ms = time.time_ns() // 1_000_000
    pid = os.getpid()
    if pid not in _open:
        path = Path(os.environ[RECORDS_ENV]) / f"runs-{pid}.txt"
        _open[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_open[pid], f"{task_id} {started_ms - due_ms}\n".encode())


@dataclass
class Starts:
    """Starts seen so far, by task id: how many, and the first one's lateness (ms)."""

    counts: dict[str, int]
    lateness: dict[str, int]

    def add_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            fields = line.split()
            if len(fields) < 2:
                continue
            task_id = fields[0]
            if task_id in self.counts:
                self.counts[task_id] += 1
            else:
                self.counts[task_id], self.lateness[task_id] = 1, int(fields[1])

    @property
    def distinct(self) -> int:
        return len(self.counts)


class RecordsFolder:
    """The records of one run, read as they are appended (a partial last line waits)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._offsets: dict[Path, int] = {}
        self.starts = Starts({}, {})

    def read_new(self) -> Starts:
        for path in sorted(self._folder.glob("runs*.txt")):
            with open(path, "rb") as f:
                f.seek(self._offsets.get(path, 0))
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            self.starts.add_lines(complete.decode().splitlines())
        return self.starts


@dataclass(frozen=True)
class Outcome:
    """Lateness due → handler start (ms) of each task's first start, and the counts."""

    started: int
    lost: int
    duplicates: int
    early: int
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None


def outcome_of(starts: Starts, expected: int) -> Outcome:
    """The figures of a run that was to start ``expected`` tasks once each."""
    ordered = sorted(starts.lateness.values())
    return Outcome(
        started=starts.distinct,
        lost=max(0, expected - starts.distinct),
        duplicates=sum(n - 1 for n in starts.counts.values()),
        early=sum(1 for v in ordered if v < 0),
        p50_ms=percentile(ordered, 0.50),
        p99_ms=percentile(ordered, 0.99),
        max_ms=ordered[-1] if ordered else None,
    )
