"""CPU time and memory of a running process and its descendants, read from ``/proc`` (Linux).

A tikk process may fork helpers (a server started with several processes, say): its figures
are those of its whole tree. CPU is ``utime + stime`` of every live process in the tree plus
what its reaped children used (``cutime + cstime`` of the root); memory is the sum of the
tree's resident sets (``VmRSS``) and the largest peak (``VmHWM``) of any one of them. The
kernel keeps no peak of a tree's sum: it is only known from samples
(``devtools.bench_procs.Peaks``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_KIB = 1024


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process tree."""

    cpu_s: float
    rss_bytes: int
    hwm_bytes: int
    processes: int


@dataclass(frozen=True)
class StatFields:
    """The fields of ``/proc/<pid>/stat`` the bench uses (CPU in clock ticks)."""

    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int


def parse_stat(text: str) -> StatFields:
    """Fields of a ``/proc/<pid>/stat`` line. The command name (field 2) is in parentheses
    and may itself contain spaces and parentheses, so fields are counted after the last ')'."""
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14..17.
    return StatFields(int(rest[1]), int(rest[11]), int(rest[12]), int(rest[13]), int(rest[14]))


def parse_status_kib(text: str, key: str) -> int:
    """A ``kB`` figure of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``) in bytes; 0 if absent
    (a kernel thread, or a process that is exiting)."""
    for line in text.splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * _KIB
    return 0


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's list: a child belongs to the thread that
    forked it)."""
    found: list[int] = []
    for task in (_PROC / str(pid) / "task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree(pid: int) -> list[int]:
    """``pid`` and every live descendant."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += _children(current)
    return out


def sample(pid: int) -> ProcSample | None:
    """The tree of ``pid`` now; None when ``pid`` has exited."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu_ticks, rss, hwm, count = 0, 0, 0, 0
    for member in tree(pid):
        try:
            stat = parse_stat((_PROC / str(member) / "stat").read_text())
            status = (_PROC / str(member) / "status").read_text()
        except OSError:
            if member == pid:
                return None
            continue  # a descendant that exited between the listing and the read
        cpu_ticks += stat.utime + stat.stime
        if member == pid:
            cpu_ticks += stat.cutime + stat.cstime
        rss += parse_status_kib(status, "VmRSS")
        hwm = max(hwm, parse_status_kib(status, "VmHWM"))
        count += 1
    return ProcSample(cpu_ticks / ticks, rss, hwm, count)
