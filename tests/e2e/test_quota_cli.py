"""Quotas from the CLI against a running group of server processes: a change made while they
serve is applied by every process within its cache, without a restart."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Process
from tests.waiting import eventually

pytestmark = pytest.mark.e2e


@pytest.fixture
def group(tmp_path: Path) -> Iterator[str]:
    server = Process(
        ["server", "--data-dir", str(tmp_path), "--shards", "8", "--listen", "127.0.0.1:0",
         "--processes", "2"],
        {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    port = server.wait_for(re.compile(r"listening on [\d.]+:(\d+)"), timeout=60).group(1)
    yield f"127.0.0.1:{port}"
    assert server.stop() == 0, server.output()


def tikk(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args, "--server", address],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=30,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def create(address: str, task_id: str) -> subprocess.CompletedProcess[str]:
    return tikk(address, "task", "create", "--namespace", "team", "--id", task_id,
                "--queue", "q", "--handler", "h", "--in", "1h")  # fmt: skip


def test_a_quota_set_from_the_cli_is_applied_by_running_servers(group: str) -> None:
    for i in range(4):  # both processes serve the namespace before any quota exists
        assert create(group, f"before-{i}").returncode == 0
    done = tikk(group, "quota", "set", "--namespace", "team", "--tasks-stored", "4",
                "--schedules", "10")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tasks_stored              4" in done.stdout and "usage: tasks_stored 4" in done.stdout
    refusals: list[str] = []
    admitted = 0  # by a process still within its cache of the old (no) quota

    def refused() -> bool:
        nonlocal admitted
        attempt = create(group, f"after-{len(refusals)}-{admitted}")
        if attempt.returncode == 1:
            refusals.append(attempt.stderr)
        else:
            admitted += attempt.returncode == 0
        return len(refusals) >= 3  # on whichever process answers, several times over

    eventually(refused, timeout=30, every=0.2)
    assert all("RESOURCE_EXHAUSTED" in r and "tasks_stored" in r for r in refusals)
    shown = tikk(group, "quota", "get", "--namespace", "team")
    usage = re.search(r"usage: tasks_stored (\d+)", shown.stdout)
    assert usage is not None and int(usage.group(1)) == 4 + admitted
    recounted = tikk(group, "quota", "recount", "--namespace", "team")
    assert f"usage: tasks_stored {4 + admitted}" in recounted.stdout, recounted.stderr
    cleared = tikk(group, "quota", "set", "--namespace", "team", "--tasks-stored", "none")
    assert "tasks_stored              unlimited" in cleared.stdout
    assert "schedules                 10" in cleared.stdout  # quotas not named are kept
    eventually(lambda: create(group, "last").returncode == 0, timeout=30, every=0.2)
