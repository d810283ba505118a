"""The CLI against separate server, dispatcher and worker processes on one data directory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Process, eventually

pytestmark = pytest.mark.e2e


@pytest.fixture
def split(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    env = {"TIKK_E2E_LOG": str(tmp_path / "executions.jsonl"), "PYTHONUNBUFFERED": "1"}
    common = ["--data-dir", str(tmp_path), "--shards", "8"]
    server = Process(["server", *common, "--listen", "127.0.0.1:0"], env)
    port = server.wait_for(re.compile(r"listening on [\d.]+:(\d+)")).group(1)
    address = f"127.0.0.1:{port}"
    dispatcher = Process(["dispatcher", *common], env)
    dispatcher.wait_for(re.compile("dispatcher running"))
    worker = Process(["worker", "tests.e2e.worker_app:worker", "--server", address], env)
    yield address, tmp_path
    for p in (worker, dispatcher, server):
        assert p.stop() == 0, p.output()


def tikk(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args, "--server", address],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def tikk_json(address: str, *args: str) -> Any:
    done = tikk(address, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_create_run_and_inspect_through_the_cli(split: tuple[str, Path]) -> None:
    address, _ = split
    created = tikk_json(
        address,
        "task",
        "create",
        "--queue",
        "e2e",
        "--handler",
        "record",
        "--id",
        "cli-1",
        "--in",
        "1s",
        "--payload",
        "hi",
        "--label",
        "team=a",
    )
    assert created["created"] is True and created["task"]["labels"] == {"team": "a"}
    eventually(
        lambda: tikk_json(address, "task", "get", "cli-1")["state"] == "TASK_STATE_SUCCEEDED"
    )
    (run,) = tikk_json(address, "runs", "task", "cli-1")["runs"]
    assert run["status"] == "RUN_STATUS_SUCCEEDED" and run["attempt"] == 1
    assert tikk_json(address, "runs", "get", run["run_id"])["task_id"] == "cli-1"
    listed = tikk_json(address, "task", "list", "--queue", "e2e", "--state", "succeeded")
    assert [t["id"] for t in listed["tasks"]] == ["cli-1"]
    text = tikk(address, "runs", "list", "--queue", "e2e", "--since", "5m")
    assert text.returncode == 0 and "cli-1" in text.stdout and "succeeded" in text.stdout


def test_cli_errors_have_exit_codes(split: tuple[str, Path]) -> None:
    address, _ = split
    missing = tikk(address, "task", "get", "nope")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    bad = tikk(address, "task", "create", "--queue", "has space", "--handler", "h")
    assert bad.returncode == 1 and "INVALID_ARGUMENT: queue" in bad.stderr
    unreachable = tikk("127.0.0.1:1", "task", "get", "x", "--timeout", "2")
    assert unreachable.returncode == 3
    cancel = tikk_json(
        address,
        "task",
        "create",
        "--queue",
        "e2e",
        "--handler",
        "record",
        "--id",
        "later",
        "--in",
        "1h",
    )
    assert cancel["task"]["state"] == "TASK_STATE_SCHEDULED"
    assert tikk_json(address, "task", "cancel", "later")["state"] == "TASK_STATE_CANCELLED"
