"""The tikk processes of one benchmark run: started as real ``tikk`` commands, each with its
role and log file, sampled for CPU and memory at the phase boundaries (and for memory in
between, so a peak within a phase is seen), stopped at the end."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devtools.proc_stats import ProcSample, sample

ROOT = Path(__file__).resolve().parents[1]
# How often memory is sampled within a phase: a tree's summed resident set has no
# high-water mark of its own, so a peak between two samples is missed.
PEAK_INTERVAL_S = 0.5


@dataclass(frozen=True)
class TikkProcess:
    """One process: ``role`` is what it runs (``server+dispatcher`` for ``tikk dev``)."""

    name: str
    role: str
    proc: subprocess.Popen[bytes]
    log: Path


class Peaks:
    """The largest resident set each process tree was seen to hold, by name, over every
    sample noted. A sample's own figure is the larger of the tree's summed resident set and
    the kernel's high-water mark of any one member (a peak of that member between samples),
    so a peak is never below a sample. Noted from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes: dict[str, int] = {}

    def note(self, taken: Mapping[str, ProcSample | None]) -> None:
        with self._lock:
            for name, s in taken.items():
                if s is not None:
                    self._bytes[name] = max(self._bytes.get(name, 0), s.rss_bytes, s.hwm_bytes)

    def bytes_of(self, name: str) -> int | None:
        """The peak of ``name`` in bytes; None if no sample of it was noted."""
        with self._lock:
            return self._bytes.get(name)


class Fleet:
    """Starts processes, remembers them, and stops them all (newest first)."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self._work = work
        self._env = env
        self.members: list[TikkProcess] = []
        # Processes sampled but not started or stopped here (name, role, pid): the local
        # stack's services, whose CPU per task belongs in the same table.
        self.services: list[tuple[str, str, int]] = []
        self.peaks = Peaks()

    @property
    def work(self) -> Path:
        """The run's scratch folder: logs, and the embedded data directory."""
        return self._work

    def spawn(self, name: str, role: str, args: list[str]) -> TikkProcess:
        log = self._work / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "server.cli", *args],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env,
            )  # fmt: skip
        member = TikkProcess(name, role, proc, log)
        self.members.append(member)
        return member

    def run(self, args: list[str]) -> None:
        """A one-off command (``migrate``); raises ``RuntimeError`` with its output if it fails."""
        done = subprocess.run(
            [sys.executable, "-m", "server.cli", *args],
            cwd=ROOT, env=self._env, capture_output=True, check=False,
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"tikk {args[0]} failed: {done.stdout!r} {done.stderr!r}")

    def sample(self) -> dict[str, ProcSample | None]:
        """CPU and memory of every process (and its children) now, by name; noted in
        ``peaks``."""
        taken = {name: sample(pid) for name, _, pid in self.sampled()}
        self.peaks.note(taken)
        return taken

    def sampled(self) -> list[tuple[str, str, int]]:
        """(name, role, pid) of every process ``sample`` covers: members, then services."""
        return [(m.name, m.role, m.proc.pid) for m in self.members] + self.services

    @contextmanager
    def watching(self, interval_s: float = PEAK_INTERVAL_S) -> Iterator[None]:
        """Sample every process every ``interval_s`` while the block runs, for ``peaks``."""
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(interval_s):
                self.sample()

        thread = threading.Thread(target=watch, name="bench-peaks", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def check_alive(self) -> None:
        """Raise ``RuntimeError`` naming the first process that exited, with its log's tail."""
        for m in self.members:
            if m.proc.poll() is not None:
                tail = m.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{m.name} exited with {m.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        for m in reversed(self.members):
            m.proc.terminate()
        for m in self.members:
            try:
                m.proc.wait(30)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()


def wait_listening(member: TikkProcess, timeout_s: float = 120) -> str:
    """The address a server printed once it listens; ``RuntimeError`` if it exits or is silent."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = member.log.read_text(errors="replace")
        if m := re.search(r"listening on ([\d.]+:\d+)", text):
            return m.group(1)
        if member.proc.poll() is not None:
            break
        time.sleep(0.1)
    tail = member.log.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"{member.name} did not start listening:\n{tail}")
