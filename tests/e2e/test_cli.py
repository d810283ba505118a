"""The CLI against separate server, dispatcher and worker processes on one data directory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Process
from tests.waiting import eventually

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


def test_a_failed_runs_traceback_is_shown_by_runs_get_and_task(
    split: tuple[str, Path],
) -> None:
    address, _ = split
    tikk_json(address, "task", "create", "--queue", "e2e", "--handler", "reject", "--id", "no")
    eventually(
        lambda: tikk_json(address, "task", "get", "no")["state"] == "TASK_STATE_DEAD_LETTERED"
    )
    (run,) = tikk_json(address, "runs", "task", "no")["runs"]
    assert run["traceback"].startswith("Traceback (most recent call last):\n")
    assert "in reject\n" in run["traceback"]
    one = tikk(address, "runs", "get", run["run_id"])
    lines = one.stdout.splitlines()
    assert "dead_lettered" in lines[0] and "NonRetryableError" in lines[0]
    assert lines[1] == "    Traceback (most recent call last):"
    assert lines[-1] == "    worker_sdk.context.NonRetryableError: payload can never be processed"
    listed = tikk(address, "runs", "task", "no", "--traceback").stdout.splitlines()
    assert listed == lines
    assert len(tikk(address, "runs", "task", "no").stdout.splitlines()) == 1


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


def test_import_a_file_with_rejects_then_again_without_creating_twice(
    split: tuple[str, Path],
) -> None:
    address, tmp = split
    source, rejects = tmp / "tasks.jsonl", tmp / "rejects.jsonl"
    rows = [json.dumps({"task_id": f"imp-{i}", "queue": "later", "handler": "record",
                        "run_at": "2030-01-01T00:00:00Z"}) for i in range(2_500)]  # fmt: skip
    rows[10] = "{not json"
    rows[1_500] = json.dumps({"task_id": "bad-queue", "queue": "a.b", "handler": "record"})
    source.write_text("\n".join(rows) + "\n")
    args = ["task", "import", str(source), "--batch-size", "1000", "--rejects", str(rejects)]
    done = tikk(address, *args)
    assert done.returncode == 0, done.stderr
    assert "2,498 accepted (2,498 created), 2 rejected" in done.stdout
    refused = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(r["line"], r["code"]) for r in refused] == [
        (11, "INVALID_ARGUMENT"), (1501, "INVALID_ARGUMENT"),
    ]  # fmt: skip
    again = tikk(address, *args, "--skip", "2000")
    assert again.returncode == 0, again.stderr
    assert "500 accepted (0 created), 0 rejected" in again.stdout
    listed = tikk_json(address, "task", "list", "--queue", "later", "--limit", "1000")
    assert len(listed["tasks"]) == 1000


def test_an_import_is_paced_by_the_namespaces_rate_not_refused(split: tuple[str, Path]) -> None:
    """1,500 tasks in batches of 1,000 into a namespace of 300 tasks a second: all accepted,
    the last of them in the fifth second of the rate at the earliest (over three seconds on)."""
    address, tmp = split
    assert tikk(address, "quota", "set", "--tasks-per-second", "300").returncode == 0
    source = tmp / "paced.jsonl"
    rows = [json.dumps({"task_id": f"p-{i}", "queue": "paced", "handler": "record",
                        "run_at": "2030-01-01T00:00:00Z"}) for i in range(1_500)]  # fmt: skip
    source.write_text("\n".join(rows) + "\n")
    began = time.monotonic()
    done = tikk(address, "task", "import", str(source), "--batch-size", "1000",
                "--rejects", str(tmp / "paced-rejects.jsonl"))  # fmt: skip
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert "1,500 accepted (1,500 created), 0 rejected" in done.stdout
    assert took >= 3.0, took
    assert "\r" not in done.stderr  # its progress, written to a pipe, is whole lines


def test_tasks_of_a_label_are_counted_and_cancelled_in_bulk(split: tuple[str, Path]) -> None:
    address, tmp = split
    source = tmp / "labelled.jsonl"
    rows = [json.dumps({"task_id": f"c-{i}", "queue": "later", "handler": "record",
                        "labels": {"customer": "acme" if i % 3 else "bolt"},
                        "run_at": "2030-01-01T00:00:00Z"}) for i in range(300)]  # fmt: skip
    source.write_text("\n".join(rows) + "\n")
    assert tikk(address, "task", "import", str(source), "--rejects", str(tmp / "r")).returncode == 0
    counted = tikk_json(address, "task", "count", "--label", "customer=acme")
    assert (counted["count"], counted["complete"]) == ("200", True)
    dry = tikk(address, "task", "cancel", "--label", "customer=acme", "--dry-run")
    assert dry.stdout.startswith("dry run: cancel would act on 200 tasks (read 200)"), dry.stdout
    done = tikk(address, "task", "cancel", "--label", "customer=acme", "--queue", "later",
                "--wait", "--action-id", "acme-out")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "acme-out  cancel succeeded  read 200  matched 200  acted 200" in done.stdout
    again = tikk(address, "task", "cancel", "--label", "customer=acme", "--action-id", "acme-out")
    assert "acted 200" in again.stdout  # the same action, not a second one
    listed = tikk_json(address, "task", "list", "--label", "customer!=acme,customer=bolt",
                       "--limit", "1000")  # fmt: skip
    assert len(listed["tasks"]) == 100
    assert {t["state"] for t in listed["tasks"]} == {"TASK_STATE_SCHEDULED"}
    actions = tikk(address, "bulk", "list").stdout.splitlines()
    assert len(actions) == 1 and actions[0].startswith("acme-out  cancel succeeded")
    neither = tikk(address, "task", "cancel")
    assert neither.returncode == 2 and "give a task id, or filter options" in neither.stderr


def test_a_dead_letter_is_purged_by_id_and_previewed_by_error_type(split: tuple[str, Path]) -> None:
    address, _ = split
    tikk_json(address, "task", "create", "--queue", "e2e", "--handler", "reject", "--id", "x")
    eventually(
        lambda: tikk_json(address, "task", "get", "x")["state"] == "TASK_STATE_DEAD_LETTERED"
    )
    preview = tikk(address, "dead-letters", "redrive", "--error-type", "NonRetryableError",
                   "--queue", "e2e", "--since", "1h", "--dry-run")  # fmt: skip
    assert "redrive would act on 1 tasks" in preview.stdout, preview.stdout
    purged = tikk(address, "dead-letters", "purge", "x")
    assert purged.returncode == 0 and purged.stdout.startswith("purged  x  dead_lettered")
    assert tikk(address, "task", "get", "x").returncode == 1


def test_a_schedule_update_shows_fires_before_and_after_and_backfill_has_a_dry_run(
    split: tuple[str, Path],
) -> None:
    address, _ = split
    made = tikk(address, "schedule", "create", "nightly", "--cron", "0 2 * * *", "--tz",
                "Europe/Oslo", "--queue", "later", "--handler", "record")  # fmt: skip
    assert made.returncode == 0, made.stderr
    dry = tikk(address, "schedule", "update", "nightly", "--cron", "0 3 * * *", "--dry-run")
    lines = dry.stdout.splitlines()
    assert (
        lines[0]
        == "schedule nightly: cron '0 2 * * *' Europe/Oslo  ->  cron '0 3 * * *' Europe/Oslo"
    )
    assert " 02:00:00" in lines[2] and " 03:00:00" in lines[2].split(")", 1)[1]
    assert lines[-1] == "dry run: nothing changed" and len(lines) == 2 + 5 + 1
    assert tikk_json(address, "schedule", "get", "nightly")["spec"]["cron"] == "0 2 * * *"
    done = tikk(address, "schedule", "update", "nightly", "--cron", "0 3 * * *")
    assert done.stdout.splitlines()[-1].startswith("updated to version"), done.stderr
    assert tikk_json(address, "schedule", "get", "nightly")["spec"]["cron"] == "0 3 * * *"
    now = datetime.now(tz=UTC).replace(microsecond=0)
    span = ["--start", (now - timedelta(days=2)).isoformat(), "--end", now.isoformat()]
    preview = tikk(address, "schedule", "backfill", "nightly", *span, "--dry-run")
    assert preview.stdout.startswith("dry run: would create 2, already there 0"), preview.stdout
    assert len(preview.stdout.splitlines()) == 3 and " 03:00:00" in preview.stdout
    assert tikk_json(address, "task", "list", "--queue", "later").get("tasks", []) == []
    assert (
        "created 2, already there 0"
        in tikk(address, "schedule", "backfill", "nightly", *span).stdout
    )
    again = tikk(address, "schedule", "backfill", "nightly", *span, "--dry-run")
    assert again.stdout.startswith("dry run: would create 0, already there 2")


def test_a_task_is_rescheduled_from_the_cli(split: tuple[str, Path]) -> None:
    address, _ = split
    tikk_json(address, "task", "create", "--queue", "later", "--handler", "record", "--id", "m",
              "--at", "2030-01-01T00:00:00Z", "--payload", "v1")  # fmt: skip
    moved = tikk_json(address, "task", "reschedule", "m", "--at", "2030-01-02T09:30:00+01:00",
                      "--payload", "v2")  # fmt: skip
    assert moved["due_time"] == "2030-01-02T08:30:00Z" and moved["state"] == "TASK_STATE_SCHEDULED"
    assert tikk_json(address, "task", "get", "m")["payload"] == "djI="  # "v2"
    missing = tikk(address, "task", "reschedule", "m")
    assert missing.returncode == 2 and "--at" in missing.stderr


def test_a_paused_queue_holds_its_tasks_until_resumed_then_runs_them_late(
    split: tuple[str, Path],
) -> None:
    address, _ = split
    paused = tikk_json(address, "queues", "pause", "e2e", "--skip-older-than", "1h")
    assert paused["paused"] is True and paused["skip_older_than"] == "3600s"
    time.sleep(1.5)  # dispatchers read the queues' settings once a second
    for i in range(5):
        tikk_json(address, "task", "create", "--queue", "e2e", "--handler", "record",
                  "--id", f"held-{i}")  # fmt: skip

    def held() -> bool:
        (q,) = [q for q in tikk_json(address, "queues", "list")["queues"] if q["name"] == "e2e"]
        return q["paused"] is True and int(q.get("held", 0)) == 5

    eventually(held)
    time.sleep(2)
    states = {tikk_json(address, "task", "get", f"held-{i}")["state"] for i in range(5)}
    assert states == {"TASK_STATE_SCHEDULED"}
    text = tikk(address, "queues", "list").stdout
    assert re.search(r"^e2e\s+.*\bpaused\s+5\s+-\s+1h$", text, re.M), text
    tikk_json(address, "queues", "resume", "e2e")

    def ran() -> bool:
        states = [tikk_json(address, "task", "get", f"held-{i}")["state"] for i in range(5)]
        return states == ["TASK_STATE_SUCCEEDED"] * 5

    eventually(ran)
    (run,) = tikk_json(address, "runs", "task", "held-0")["runs"]
    due = datetime.fromisoformat(run["due_time"])
    fired = datetime.fromisoformat(run["fired_time"])
    assert fired - due >= timedelta(seconds=2)  # its lateness is the time it was held
    wrong = tikk(address, "queues", "limit", "e2e", "--rate", "-1")
    assert wrong.returncode == 1 and "max_per_second" in wrong.stderr
    limited = tikk_json(address, "queues", "limit", "e2e", "--rate", "50")
    assert limited["max_per_second"] == 50 and "paused" not in limited
