"""``python -m devtools bench --smoke``: the scale benchmark at a small size, run for real (server,
dispatcher and worker processes), checked for complete and sane output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.bench_report import README_END, README_START

# The first test runs the whole benchmark (its fixture).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]
_RUN_KEYS = {"backend", "mode", "stored", "fired", "ceiling", "load", "fire_ingest", "fire",
             "cdf", "processes", "disk", "ingest_ratio"}  # fmt: skip
_FIRE_KEYS = {"distinct", "duplicates", "missing", "queue_ms", "handler_ms",
              "store_reads_per_s", "dispatcher_cpu_pct", "early"}  # fmt: skip

pytest.importorskip("matplotlib", reason="the bench's plots need the bench extra")


def _devtools(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devtools", *args],
        cwd=cwd, env=os.environ.copy(), capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench") / "results"
    done = _devtools("bench", "--smoke", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    return out, json.loads((out / "results.json").read_text())


def test_smoke_writes_every_output(smoke: tuple[Path, dict[str, Any]]) -> None:
    out, results = smoke
    for name in ("results.json", "results.md", "lateness_cdf.png", "ingest_rate.png"):
        assert (out / name).stat().st_size > 0, name
    for png in ("lateness_cdf.png", "ingest_rate.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "### Fire phase" in (out / "results.md").read_text()
    assert results["command"] == "python -m devtools bench --smoke"  # --out: a local path
    (run,) = results["runs"]
    assert run.keys() >= _RUN_KEYS
    assert run["fire"].keys() >= _FIRE_KEYS


def test_every_fired_task_ran_and_none_early(smoke: tuple[Path, dict[str, Any]]) -> None:
    (run,) = smoke[1]["runs"]
    fire = run["fire"]
    assert (run["backend"], run["stored"], run["fired"]) == ("embedded", 2_000, 500)
    assert (fire["distinct"], fire["missing"], fire["early"]) == (500, 0, 0)
    assert fire["handler_ms"]["count"] == 500
    assert 0 <= fire["handler_ms"]["p50"] <= fire["handler_ms"]["p99"] <= fire["handler_ms"]["max"]
    assert run["cdf"]["handler_ms"][-1][1] == 1.0


def test_ingest_ceiling_and_ratio_are_measured(smoke: tuple[Path, dict[str, Any]]) -> None:
    (run,) = smoke[1]["runs"]
    assert run["load"]["tasks"] == 2_000 and run["load"]["per_s"] > 0
    assert run["load"]["series"]
    assert run["ceiling"]["tasks"] == 2_000 and run["ceiling"]["per_s"] > 0
    assert run["ingest_ratio"] > 0


def test_processes_reads_and_disk_are_measured(smoke: tuple[Path, dict[str, Any]]) -> None:
    (run,) = smoke[1]["runs"]
    roles = {p["role"] for p in run["processes"]}
    assert roles == {"server+dispatcher", "worker"}
    for p in run["processes"]:
        assert p["cpu_s"]["done"] > p["cpu_s"]["start"] >= 0
        assert p["rss_mb"]["done"] > 0 and p["hwm_mb"] >= p["rss_mb"]["done"]
        assert p["cpu_s_per_1000"]["lifecycle"] is not None
    # The dispatcher reads its owned shards' due slices all through the fire phase.
    assert run["fire"]["store_reads_per_s"] > 0
    assert run["disk"]["bytes_per_task"] > 0


def test_readme_section_is_regenerated_from_the_results(
    smoke: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# t\n\nbefore\n{README_START}\nold\n{README_END}\nafter\n")
    done = _devtools("bench-readme", str(smoke[0] / "results.json"), "--readme", str(readme))
    assert done.returncode == 0, done.stdout + done.stderr
    text = readme.read_text()
    assert "old" not in text and "before" in text and "after" in text
    assert "### Fire phase" in text and "| embedded | 2,000 | 500 | 50 |" in text
