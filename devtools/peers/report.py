"""What ``bench-peers`` writes: ``results.json`` (every run) and ``results.md``, one table per
workload with a row per system and tikk's lateness (or memory) over each peer's.

Pure but for writing the files: it reads the JSON-ready mapping the command builds. With
several runs, a row shows the median of each figure over the runs that finished, and the
worst run's lost, duplicate and early counts.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devtools.peers.workloads import WORKLOADS

_WORST = ("lost", "duplicates", "early")
_MEDIAN = ("p50_ms", "p99_ms", "max_ms", "ingest_per_s", "cpu_s", "peak_rss_mb")
_FIRE_HEADER = (
    "system", "start p50 ms", "p99 ms", "max ms", "lost", "dup", "ingest/s", "CPU s",
    "peak RSS MB", "tikk ÷ peer p50", "tikk ÷ peer p99",
)  # fmt: skip
_HOLD_HEADER = ("system", "ingest/s", "CPU s", "peak RSS MB", "started early", "tikk ÷ peer RSS")
OVERRAN_MARK = "†"


def combine(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One row's figures from the runs of one system on one workload; ``error`` (the first
    run's) when none finished."""
    done = [r for r in runs if "error" not in r]
    if not done:
        return {"error": runs[0]["error"] if runs else "not run"}
    row: dict[str, Any] = {k: max(r[k] for r in done) for k in _WORST}
    for key in _MEDIAN:
        known = [r[key] for r in done if r.get(key) is not None]
        row[key] = statistics.median(known) if known else None
    row["ingest_overran"] = any(r.get("ingest_overran") for r in done)
    row["failed_runs"] = len(runs) - len(done)
    return row


def ratio(tikk: float | None, peer: float | None) -> str:
    """tikk's figure over the peer's, as the table shows it (below 1: tikk's is smaller)."""
    if tikk is None or peer is None or peer <= 0:
        return "—"
    value = tikk / peer
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"  # two digits that say something


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _failed(name: str, row: dict[str, Any], width: int) -> list[str]:
    reason = row["error"].splitlines()[0][:100].replace("|", "/")
    return [name, f"failed: {reason}", *["—"] * (width - 2)]


def _ingest(row: dict[str, Any]) -> str:
    return _num(row["ingest_per_s"]) + (f" {OVERRAN_MARK}" if row["ingest_overran"] else "")


def _fire_row(name: str, row: dict[str, Any], tikk: dict[str, Any] | None) -> list[str]:
    if "error" in row:
        return _failed(name, row, len(_FIRE_HEADER))
    mine = tikk if tikk and "error" not in tikk else {}
    return [
        name, _num(row["p50_ms"]), _num(row["p99_ms"]), _num(row["max_ms"]),
        _num(row["lost"]), _num(row["duplicates"]), _ingest(row), f"{row['cpu_s']:.1f}",
        _num(row["peak_rss_mb"]), ratio(mine.get("p50_ms"), row["p50_ms"]),
        ratio(mine.get("p99_ms"), row["p99_ms"]),
    ]  # fmt: skip


def _hold_row(name: str, row: dict[str, Any], tikk: dict[str, Any] | None) -> list[str]:
    if "error" in row:
        return _failed(name, row, len(_HOLD_HEADER))
    mine = tikk if tikk and "error" not in tikk else {}
    return [
        name, _ingest(row), f"{row['cpu_s']:.1f}", _num(row["peak_rss_mb"]),
        _num(row["early"]), ratio(mine.get("peak_rss_mb"), row["peak_rss_mb"]),
    ]  # fmt: skip


def workload_table(results: dict[str, Any], workload: str) -> str:
    """The table of one workload: a row per system, in the order they were asked for."""
    runs = [r for r in results["runs"] if r["workload"] == workload]
    rows = {name: combine([r for r in runs if r["system"] == name]) for name in results["systems"]}
    tikk = rows.get("tikk")
    held = WORKLOADS[workload].held
    make, header = (_hold_row, _HOLD_HEADER) if held else (_fire_row, _FIRE_HEADER)
    return _table(header, [make(name, row, tikk) for name, row in rows.items()])


def peers_markdown(results: dict[str, Any]) -> str:
    """The whole report: how it was made, then a table per workload."""
    host = results["host"]
    versions = ", ".join(f"{k} {v}" for k, v in results["versions"].items())
    parts = [
        "## tikk and its peers", "",
        f"`{results['command']}`, {results['started_utc']}, {host['cpus']} CPUs, "
        f"{host['mem_gib']} GiB; scale {results['scale']:g}, {results['run_count']} run(s).",
        f"Versions: {versions}.", "",
        "Lateness is due → handler start (ms) of each task's first start; lost: never started "
        "by the deadline; dup: starts beyond one per task. CPU s: every process of the system "
        "(its redis-server included) from ready to done; peak RSS: the largest sum of their "
        "resident sets, sampled twice a second (pages forked processes share are counted in each). "
        "tikk ÷ peer below 1: tikk's figure is smaller.",
    ]  # fmt: skip
    for name in results["workloads"]:
        described = results["workload_text"][name]
        parts += ["", f"### {name}: {described}", "", workload_table(results, name)]
    if any(r.get("ingest_overran") for r in results["runs"]):
        parts += ["", f"{OVERRAN_MARK} creating the tasks took longer than the lead: the "
                  "first were due before the last was created."]  # fmt: skip
    return "\n".join(parts) + "\n"


def write_peer_results(results: dict[str, Any], out: Path) -> None:
    """``results.json`` and ``results.md`` in ``out`` (made if missing); rewritten after
    each run, so a run cut short keeps what was measured."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(peers_markdown(results), encoding="utf-8")
