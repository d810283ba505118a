"""Where each process's time goes during the benchmark's fire phase: ``py-spy record`` on every
process of the run (children included), summarised by area and by our own functions.

The area of a sample is the library its innermost Python frame belongs to: time spent in C
(SQLite, the Cassandra driver's event loop, TLS) is counted to the Python frame that called
it, so ``tikk.store.sqlite`` includes the SQLite engine's work for it. Only samples of
threads on the CPU are counted (py-spy's default), so the shares are of CPU time, not of
wall time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devtools.bench_procs import Fleet

RATE_HZ = 100
TOP = 12
# Our packages: an area per second-level folder (``tikk/store/cassandra`` → tikk.store.cassandra).
_OWN = ("tikk", "server", "dispatcher", "worker_sdk", "history", "devtools")
# Libraries by the first folder of their frames' files.
_LIBRARIES = {
    "grpc": "grpc", "cassandra": "cassandra-driver", "aiokafka": "aiokafka", "kafka": "aiokafka",
    "kazoo": "kazoo", "google": "protobuf", "asyncio": "asyncio", "opentelemetry": "opentelemetry",
    "logging": "logging", "concurrent": "thread pool", "threading.py": "threads",
    "ssl.py": "ssl", "selectors.py": "asyncio", "socket.py": "sockets", "sqlite3": "sqlite3",
}  # fmt: skip


def py_spy() -> str | None:
    """The py-spy executable beside this interpreter or on PATH, if any."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextmanager
def profiling(fleet: Fleet, folder: Path) -> Iterator[None]:
    """Record every process of ``fleet`` while the block runs, one raw (collapsed stacks) file
    per process in ``folder``. Raises ``RuntimeError`` if py-spy is not installed."""
    exe = py_spy()
    if exe is None:
        raise RuntimeError("py-spy not found: pip install py-spy (part of the dev extra)")
    folder.mkdir(parents=True, exist_ok=True)
    recorders = [_record(exe, m.proc.pid, folder / f"{m.name}.txt") for m in fleet.members]
    try:
        yield
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its file on the way out
        for recorder in recorders:
            try:
                recorder.wait(60)
            except subprocess.TimeoutExpired:
                recorder.kill()


def _record(exe: str, pid: int, out: Path) -> subprocess.Popen[bytes]:
    # Without pausing the process (--nonblocking), so the figures measured meanwhile hold.
    args = ["record", "--pid", str(pid), "--subprocesses", "--nonblocking"]
    args += ["--rate", str(RATE_HZ), "--format", "raw", "--output", str(out)]
    return subprocess.Popen(
        [exe, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )


def summarise(folder: Path) -> dict[str, Any]:
    """Per process file in ``folder``: CPU seconds sampled, the share of each area (innermost
    frame) and of our functions (the innermost of ours on each sample, so a function is
    charged with the library and C work it called)."""
    return {path.stem: summary(path) for path in sorted(folder.glob("*.txt"))}


def summary(path: Path) -> dict[str, Any]:
    areas: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        areas[area_of(frames[-1])] += n
        functions[innermost_own(frames)] += n
    return {
        "cpu_s": round(total / RATE_HZ, 2),
        "areas": _shares(areas, total),
        "functions": _shares(functions, total),
    }


def _shares(counts: Counter[str], total: int) -> list[tuple[str, float]]:
    return (
        [(name, round(100 * n / total, 1)) for name, n in counts.most_common(TOP)] if total else []
    )


def _file_of(frame: str) -> str:
    """``"fn (path/to/file.py:12)"`` → ``"path/to/file.py"``."""
    inside = frame.rpartition(" (")[2].rstrip(")")
    return inside.rpartition(":")[0] or inside


def area_of(frame: str) -> str:
    parts = _file_of(frame).replace(os.sep, "/").split("/")
    if parts[0] in _OWN:
        return ".".join(p.removesuffix(".py") for p in parts[:3] if not p.startswith("__init__"))
    return _LIBRARIES.get(parts[0], "python, other")


def innermost_own(frames: list[str]) -> str:
    """``module.function`` of the innermost of our frames; "(libraries only)" if none is."""
    for frame in reversed(frames):
        path = _file_of(frame).replace(os.sep, "/")
        if path.split("/")[0] in _OWN:
            module = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            return f"{module}.{frame.partition(' (')[0]}"
    return "(libraries only)"


def render(profiles: dict[str, Any]) -> list[str]:
    """Markdown lines: per process, its CPU seconds, top areas and top functions."""
    lines = ["| process | CPU s sampled | where (innermost frame) | our innermost function |",
             "| --- | --- | --- | --- |"]  # fmt: skip
    for name, p in profiles.items():
        areas = ", ".join(f"{a} {s:g} %" for a, s in p["areas"][:6])
        funcs = ", ".join(f"`{f}` {s:g} %" for f, s in p["functions"][:6])
        lines.append(f"| {name} | {p['cpu_s']:g} | {areas} | {funcs} |")
    return lines
