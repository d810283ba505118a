"""The processes of one system under test: started in sessions of their own, sampled as
``devtools.bench_procs.Fleet`` samples tikk's, and always stopped by process group.

A system's memory is the sum of the resident sets of all its process trees at one sample
(a server, its workers, its ``redis-server``), and its peak the largest such sum; the
samples are taken twice a second while a run is watched.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from devtools.bench_procs import ROOT, Fleet, TikkProcess
from devtools.proc_stats import ProcSample

STOP_GRACE_S = 15.0


class PeerFleet(Fleet):
    """A ``Fleet`` whose members are any commands, each the leader of its own process group."""

    def __init__(self, work: Path, env: dict[str, str], records: Path) -> None:
        super().__init__(work, env)
        self._launch_env = env
        self.records = records  # where the handlers record their starts (devtools.peers.records)
        self._total_lock = threading.Lock()
        self._total_peak = 0

    def launch(self, name: str, role: str, argv: Sequence[str]) -> TikkProcess:
        """Start ``argv`` from the checkout's root, its output in ``<work>/<name>.log``."""
        log = self.work / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                list(argv), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self._launch_env, start_new_session=True,
            )  # fmt: skip
        member = TikkProcess(name, role, proc, log)
        self.members.append(member)
        return member

    def set_env(self, key: str, value: str) -> None:
        """Set ``key`` in the environment of the members launched from now on."""
        self._launch_env[key] = value

    def sample(self) -> dict[str, ProcSample | None]:
        taken = super().sample()
        total = sum(s.rss_bytes for s in taken.values() if s is not None)
        with self._total_lock:
            self._total_peak = max(self._total_peak, total)
        return taken

    @property
    def total_peak_bytes(self) -> int:
        """The largest summed resident set of all members seen in one sample."""
        with self._total_lock:
            return self._total_peak

    def stop(self) -> None:
        """SIGTERM every member's process group (newest first), SIGKILL what is left after
        ``STOP_GRACE_S``; a group's stragglers are killed even when its leader exited."""
        for m in reversed(self.members):
            _signal_group(m.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for m in self.members:
            with contextlib.suppress(subprocess.TimeoutExpired):
                m.proc.wait(max(0.1, deadline - time.monotonic()))
        for m in self.members:
            _signal_group(m.proc.pid, signal.SIGKILL)
            m.proc.wait()

    def wait_file(self, path: Path, what: str, timeout_s: float) -> None:
        """Wait until ``path`` exists; ``RuntimeError`` if a member exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not ready after {timeout_s:g} s")
            time.sleep(0.05)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def python_argv(*args: str) -> list[str]:
    """A command of this interpreter (the checkout's virtualenv)."""
    return [sys.executable, *args]
