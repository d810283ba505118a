"""The tikk processes of one benchmark run: started as real ``tikk`` commands, each with its
role and log file, sampled for CPU and memory at the phase boundaries, stopped at the end."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from devtools.proc_stats import ProcSample, sample

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class TikkProcess:
    """One process: ``role`` is what it runs (``server+dispatcher`` for ``tikk dev``)."""

    name: str
    role: str
    proc: subprocess.Popen[bytes]
    log: Path


class Fleet:
    """Starts processes, remembers them, and stops them all (newest first)."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self._work = work
        self._env = env
        self.members: list[TikkProcess] = []

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
        """CPU and memory of every process (and its children) now, by name."""
        return {m.name: sample(m.proc.pid) for m in self.members}

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
