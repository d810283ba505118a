"""The pure parts of ``python -m devtools bench-peers``: the counting of starts from the
handlers' records, the report's tables and ratios, and what the command says when something
the asked-for systems need is missing. Nothing here needs redis-server or a peer library."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.peers import cli, records
from devtools.peers.records import RecordsFolder, Starts, outcome_of
from devtools.peers.report import combine, peers_markdown, ratio, workload_table
from devtools.peers.requirements import missing_requirements
from devtools.peers.runner import lead_ms
from devtools.peers.workloads import DAY_MS, WORKLOADS, plan_for
from tests.source_tree import ROOT

_PEER_LIBRARIES = ("celery", "kombu", "arq", "apscheduler", "sqlalchemy", "redis")


def _starts(lines: list[str]) -> Starts:
    starts = Starts({}, {})
    starts.add_lines(lines)
    return starts


def test_lateness_lost_and_duplicates_are_counted_by_task_id() -> None:
    lines = [f"t{i} {i}" for i in range(1, 101)] + ["t5 900", "t5 901", "t7 3", "", "x"]
    outcome = outcome_of(_starts(lines), expected=103)
    assert (outcome.started, outcome.lost, outcome.duplicates) == (100, 3, 3)
    # The first start of a task counts for its lateness; a duplicate does not move it.
    assert (outcome.p50_ms, outcome.p99_ms, outcome.max_ms, outcome.early) == (50, 99, 100, 0)


def test_early_starts_and_a_run_with_no_start() -> None:
    assert outcome_of(_starts(["a -5", "b 2 17"]), expected=2).early == 1  # tikk's 3 fields
    empty = outcome_of(_starts([]), expected=4)
    assert (empty.lost, empty.p50_ms, empty.p99_ms, empty.max_ms) == (4, None, None, None)


def test_records_are_read_across_files_and_a_partial_line_waits(tmp_path: Path) -> None:
    (tmp_path / "runs-1.txt").write_text("a 1\nb 2\nc")
    (tmp_path / "runs-tikk.txt").write_text("a 4 0\n")
    (tmp_path / "ready-celery").write_text("not a record\n")
    folder = RecordsFolder(tmp_path)
    assert folder.read_new().counts == {"a": 2, "b": 1}
    with open(tmp_path / "runs-1.txt", "a", encoding="utf-8") as f:
        f.write(" 3\n")
    starts = folder.read_new()
    assert (starts.counts, starts.lateness) == ({"a": 2, "b": 1, "c": 1}, {"a": 1, "b": 2, "c": 3})


def test_a_handler_records_its_start_in_a_file_of_its_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(records.RECORDS_ENV, str(tmp_path))
    monkeypatch.setattr(records, "_open", {})
    records.record("t1", due_ms=0)
    os.close(records._open.pop(os.getpid()))
    task_id, lateness = (tmp_path / f"runs-{os.getpid()}.txt").read_text().split()
    assert task_id == "t1" and int(lateness) > 1_600_000_000_000


def test_workloads_scale_and_plan_their_due_times() -> None:
    a = WORKLOADS["A"].scaled(0.1)
    assert (a.tasks, a.rate) == (1_000, 100.0)
    plan = plan_for(a, "A1-", now_ms=1_000, lead_ms=5_000)
    assert (plan.task_id(3), plan.due_ms(0), plan.due_ms(100), plan.last_due_ms) == (
        "A1-3", 6_000, 7_000, 15_990,
    )  # fmt: skip
    burst = plan_for(WORKLOADS["C"], "C1-", now_ms=0, lead_ms=5_000)
    assert burst.due_ms(0) == burst.last_due_ms == 5_000
    assert plan_for(WORKLOADS["D"], "D1-", now_ms=0, lead_ms=5_000).due_ms(0) == DAY_MS
    assert lead_ms(WORKLOADS["A"], expected_per_s=1_000.0) == 3_000 + 14_000


def _run(system: str, workload: str = "A", **figures: Any) -> dict[str, Any]:
    base = {"system": system, "workload": workload, "run": 1, "tasks": 100, "lost": 0,
            "duplicates": 0, "early": 0, "p50_ms": 10, "p99_ms": 40, "max_ms": 60,
            "ingest_per_s": 5_000.0, "cpu_s": 1.5, "peak_rss_mb": 120.0,
            "ingest_overran": False}  # fmt: skip
    return {**base, **figures}


def _results(
    runs: list[dict[str, Any]], systems: list[str], workloads: list[str]
) -> dict[str, Any]:
    return {
        "command": "python -m devtools bench-peers", "started_utc": "2026-01-01T00:00:00Z",
        "host": {"cpus": 2, "mem_gib": 8.0}, "scale": 1.0, "run_count": 1,
        "versions": {"celery": "5.6.3"}, "systems": systems, "workloads": workloads,
        "workload_text": {w: WORKLOADS[w].describe() for w in workloads}, "runs": runs,
    }  # fmt: skip


def test_ratios_are_tikk_over_the_peer() -> None:
    assert (ratio(40, 20), ratio(10, 40), ratio(7, 7)) == ("2.00", "0.25", "1.00")
    assert (ratio(3, 1_097), ratio(1, 20)) == ("0.0027", "0.05")
    # No figure, or a peer at 0 ms, gives no ratio rather than a division by zero.
    assert (ratio(None, 5), ratio(5, None), ratio(5, 0)) == ("—", "—", "—")


def test_a_fire_table_has_a_row_per_system_and_shows_a_failed_one() -> None:
    failed = {"system": "arq", "workload": "A", "run": 1, "tasks": 100}
    failed["error"] = "RuntimeError: arq-worker exited with 1:\nTraceback | ..."
    runs = [
        _run("tikk", p50_ms=20, p99_ms=30),
        _run("celery", p50_ms=10, p99_ms=60, lost=2, ingest_overran=True),
        failed,
    ]
    lines = workload_table(_results(runs, ["tikk", "celery", "arq"], ["A"]), "A").splitlines()
    assert len(lines) == 2 + 3 and all(line.count("|") == 12 for line in lines)
    assert lines[0].endswith("| tikk ÷ peer p50 | tikk ÷ peer p99 |")
    assert lines[2].startswith("| tikk | 20 | 30 |") and lines[2].endswith("| 1.00 | 1.00 |")
    assert lines[3].endswith("| 2.00 | 0.50 |") and "| 2 |" in lines[3] and "5,000 †" in lines[3]
    assert lines[4].startswith("| arq | failed: RuntimeError: arq-worker exited with 1: | — |")


def test_without_tikk_the_ratios_are_empty_and_a_hold_table_compares_memory() -> None:
    runs = [_run("celery"), _run("tikk", "D", peak_rss_mb=150.0),
            _run("celery", "D", peak_rss_mb=600.0, early=1)]  # fmt: skip
    assert (
        workload_table(_results(runs, ["celery"], ["A"]), "A").splitlines()[2].endswith("| — | — |")
    )
    held = workload_table(_results(runs, ["tikk", "celery"], ["D"]), "D").splitlines()
    assert held[0] == (
        "| system | ingest/s | CPU s | peak RSS MB | started early | tikk ÷ peer RSS |"
    )
    assert held[3] == "| celery | 5,000 | 1.5 | 600 | 1 | 0.25 |"


def test_several_runs_show_the_median_and_the_worst_counts() -> None:
    runs = [_run("tikk", p99_ms=v, lost=lost) for v, lost in ((10, 0), (50, 3), (30, 1))]
    row = combine([*runs, {"error": "RuntimeError: boom"}])
    assert (row["p99_ms"], row["lost"], row["failed_runs"]) == (30, 3, 1)
    assert combine([{"error": "RuntimeError: boom"}]) == {"error": "RuntimeError: boom"}


def test_the_report_has_a_section_per_workload() -> None:
    runs = [_run("tikk"), _run("tikk", "C"), _run("tikk", "D")]
    text = peers_markdown(_results(runs, ["tikk"], ["A", "C", "D"]))
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == [
        "### A: 10,000 tasks due over 10 s (1,000/s)",
        "### C: 10,000 tasks due at one instant",
        "### D: 50,000 tasks due tomorrow (memory while holding them)",
    ]
    assert "Versions: celery 5.6.3." in text and "†" not in text


def test_what_is_missing_is_named_with_the_step_that_installs_it() -> None:
    def nothing_installed(name: str) -> bool:
        return False

    def no_binary(name: str) -> str | None:
        return None

    assert missing_requirements(["tikk"], no_binary, nothing_installed) == []
    assert missing_requirements(["apscheduler"], no_binary, nothing_installed) == [
        "Python packages not installed: apscheduler, sqlalchemy: "
        "pip install -e '.[peers]'  (the tikk[peers] extra)"
    ]
    assert missing_requirements(["tikk", "redis-poller"], no_binary, lambda name: True) == [
        "redis-server not found: apt-get install redis-server"
    ]


def test_the_command_exits_1_saying_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        cli, "missing_requirements", lambda systems: [f"redis-server not found ({systems})"]
    )
    args = argparse.Namespace(systems="tikk,celery", workloads="A", scale=1.0, runs=1, out=None)
    assert cli.run_command(args) == 1
    assert "redis-server not found (['tikk', 'celery'])" in capsys.readouterr().err
    args.systems = "tikk,rq"
    assert cli.run_command(args) == 2
    assert "unknown system 'rq'" in capsys.readouterr().err


def test_the_command_loads_no_peer_library_until_a_peer_runs() -> None:
    code = (
        "import sys, devtools.__main__, devtools.peers.cli, devtools.peers.runner\n"
        f"print(sorted(m for m in {_PEER_LIBRARIES!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"
