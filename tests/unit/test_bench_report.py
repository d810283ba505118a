"""The pure parts of ``python -m devtools bench``: percentiles, the report's tables, the README
section, the parsing of what processes report (``/proc`` lines, the dispatcher's read
totals), and how the peaks of the processes' memory are kept."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from devtools import bench_procs
from devtools.bench import BenchConfig, _fire_figures
from devtools.bench_report import (
    README_END,
    README_START,
    cdf_points,
    comparison_rows,
    fire_table,
    merge_results,
    percentile,
    readme_section,
    render_markdown,
    replace_section,
    summarize,
    target_rows,
    windowed,
)
from devtools.dispatch_reads import ReadTotals, rate_between, totals
from devtools.proc_stats import ProcSample, parse_stat, parse_status_kib


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1.0)) == (
        50, 99, 100,
    )  # fmt: skip
    assert percentile([7], 0.99) == 7
    assert percentile([], 0.5) is None
    assert summarize([3, 5, 9]) == {"count": 3, "p50": 5, "p99": 9, "max": 9}


def test_cdf_points_are_bounded_and_end_at_one() -> None:
    points = cdf_points(list(range(10_000)), points=50)
    assert len(points) <= 50
    assert points[-1] == [9_999.0, 1.0]
    shares = [p[1] for p in points]
    assert shares == sorted(shares)
    assert cdf_points([]) == []


def _run(backend: str, stored: int, *, p99: int, reads: float, cpu: float, rss: float,
         tikk: float = 6_000.0, ratio: float = 0.9) -> dict[str, Any]:  # fmt: skip
    dispatcher = "server+dispatcher" if backend == "embedded" else "dispatcher"
    return {
        "backend": backend, "mode": "spread", "stored": stored, "fired": 1_000, "rate": 100.0,
        "load": {"tasks": stored, "seconds": 1.0, "per_s": tikk, "series": [[1.0, tikk]]},
        "fire_ingest": {"tasks": 1_000, "seconds": 0.5, "per_s": 2_000.0},
        "ceiling": {"method": "driver", "tasks": stored, "seconds": 1.0, "per_s": tikk / ratio},
        "ingest_ratio": ratio,
        "fire": {
            "distinct": 1_000, "duplicates": 0, "missing": 0, "early": 0,
            "queue_ms": {"count": 1_000, "p50": 3, "p99": 20, "max": 40},
            "handler_ms": {"count": 1_000, "p50": 10, "p99": p99, "max": p99 + 5},
            "store_reads_per_s": reads, "dispatcher_cpu_pct": cpu,
        },
        "processes": [{
            "name": "d", "role": dispatcher, "rss_mb": {"loaded": rss, "done": rss},
            "hwm_mb": rss, "cpu_s_per_1000": {"load": 0.1, "lifecycle": 2.0, "fire": 1.0},
        }],
        "disk": {"bytes": stored * 500, "bytes_per_task": 500.0, "source": "x", "flushed": True},
        "cdf": {"handler_ms": [[10.0, 0.5], [p99, 1.0]], "queue_ms": [[3.0, 1.0]]},
    }  # fmt: skip


def test_many_stored_against_few_flags_what_moved_past_the_targets() -> None:
    few = _run("stack", 10_000, p99=100, reads=200.0, cpu=20.0, rss=100.0)
    many = _run("stack", 10_000_000, p99=105, reads=260.0, cpu=21.0, rss=180.0)
    rows = {row[4]: row for row in comparison_rows([many, few])}
    assert rows["start lateness p99 ms"][-2:] == ["+5%", "yes"]
    assert rows["store reads/s"][-2:] == ["+30%", "**no**"]
    assert rows["dispatcher CPU %"][-1] == "yes"
    assert rows["dispatcher RSS MB"][-2:] == ["+80.0 MB", "**no**"]
    # One stored count per backend: nothing to compare.
    assert comparison_rows([few]) == []


def test_cassandra_ingest_target_needs_both_the_share_and_the_rate() -> None:
    met = _run("stack", 1_000, p99=1, reads=1, cpu=1, rss=1, tikk=6_000, ratio=0.9)
    slow = _run("stack", 1_000, p99=1, reads=1, cpu=1, rss=1, tikk=4_000, ratio=0.95)
    low = _run("stack", 1_000, p99=1, reads=1, cpu=1, rss=1, tikk=9_000, ratio=0.5)
    embedded = _run("embedded", 1_000, p99=1, reads=1, cpu=1, rss=1)
    verdicts = [row[-1] for row in target_rows([met, slow, low, embedded])]
    assert verdicts == ["yes", "**no**", "**no**", "n/a"]


def test_markdown_holds_every_table() -> None:
    runs = [_run("embedded", 10_000, p99=50, reads=100.0, cpu=10.0, rss=60.0),
            _run("embedded", 10_000_000, p99=52, reads=101.0, cpu=10.5, rss=70.0)]  # fmt: skip
    text = render_markdown({"started_utc": "T", "host": {"cpus": 2, "mem_gib": 8}, "runs": runs})
    for heading in ("Ingest through ImportTasks", "Fire phase", "Many stored against few",
                    "Processes", "Bytes on disk"):  # fmt: skip
        assert f"### {heading}" in text
    assert "| embedded | 10,000,000 | 1,000 | 100 | 1,000 (+0 dup, 0 missing) |" in text
    assert "No two runs" not in text


def test_readme_section_replaces_only_between_the_markers() -> None:
    results = {"runs": [_run("embedded", 10, p99=1, reads=1.0, cpu=1.0, rss=1.0)]}
    readme = f"# tikk\nintro\n{README_START}\nold figures\n{README_END}\n## Next\n"
    section = readme_section(results)
    new = replace_section(readme, section)
    assert new.startswith("# tikk\nintro\n") and new.endswith("\n## Next\n")
    assert "old figures" not in new and "### Fire phase" in new
    assert replace_section(new, section) == new  # regenerating is stable


def test_results_of_separate_runs_merge_into_one_report() -> None:
    embedded = {
        "command": "python -m devtools bench --backends embedded",
        "started_utc": "a",
        "runs": [_run("embedded", 10, p99=1, reads=1.0, cpu=1.0, rss=1.0)],
    }
    stack = {"command": "python -m devtools bench --backends stack", "started_utc": "b",
             "runs": [_run("stack", 10, p99=1, reads=1.0, cpu=1.0, rss=1.0)]}  # fmt: skip
    merged = merge_results([embedded, stack])
    assert [r["backend"] for r in merged["runs"]] == ["embedded", "stack"]
    assert merged["command"] == (
        "python -m devtools bench --backends embedded; python -m devtools bench --backends stack"
    )
    section = readme_section(merged, ["docs/bench/lateness_cdf.png"])
    assert "| stack |" in section and "![lateness cdf](docs/bench/lateness_cdf.png)" in section
    with pytest.raises(ValueError):
        merge_results([])


@pytest.mark.parametrize(
    "readme",
    ["no markers", f"{README_END} {README_START}", f"{README_START}{README_START}{README_END}"],
)
def test_readme_without_one_pair_of_markers_is_refused(readme: str) -> None:
    with pytest.raises(ValueError, match="bench:start"):
        replace_section(readme, "x")


def test_proc_stat_fields_survive_odd_command_names() -> None:
    # Fields after the command: state ppid ... utime(14) stime(15) cutime(16) cstime(17).
    rest = "S 41 " + " ".join(["0"] * 9) + " 250 50 7 3 20 0"
    stat = parse_stat(f"1234 (tikk (w) x) {rest}")
    assert (stat.ppid, stat.utime, stat.stime, stat.cutime, stat.cstime) == (41, 250, 50, 7, 3)
    status = "Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"
    assert parse_status_kib(status, "VmRSS") == 1024 * 1024
    assert parse_status_kib(status, "VmSwap") == 0


def test_read_rate_spans_the_logged_totals_around_the_window() -> None:
    log = "\n".join([
        "x INFO tikk.dispatcher: store reads at 1000 ms: 10 reads, 0 rows",
        "x INFO tikk.dispatcher: store reads at 11000 ms: 110 reads, 50 rows",
        "x INFO tikk.dispatcher: store reads at 21000 ms: 310 reads, 150 rows",
        "x INFO tikk.dispatcher: store reads at 31000 ms: 330 reads, 150 rows",
    ])  # fmt: skip
    points = totals(log)
    assert points[1] == ReadTotals(11_000, 110, 50)
    rate = rate_between(points, 12_000, 20_000)
    assert rate is not None
    assert (rate.reads_per_s, rate.rows_per_s, rate.from_ms, rate.to_ms) == (
        20.0, 10.0, 11_000, 21_000,
    )  # fmt: skip
    assert rate_between(points[:1], 0, 1) is None


def _body_rows(markdown: str, heading: str) -> list[list[str]]:
    """The cells of the rows of the first table under ``### heading`` (header and rule left
    out)."""
    section = markdown.split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
    lines = section.strip().split("\n\n", 1)[0].splitlines()
    assert lines[1].startswith("| ---"), lines[:2]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]


def _report(*runs: dict[str, Any]) -> str:
    return render_markdown({"started_utc": "T", "host": {"cpus": 2}, "runs": list(runs)})


def test_the_ingest_table_has_a_row_per_run() -> None:
    few = _run("stack", 10_000, p99=1, reads=1, cpu=1, rss=1, tikk=5_252.0, ratio=0.46)
    many = _run("stack", 10_000_000, p99=1, reads=1, cpu=1, rss=1, tikk=5_224.0, ratio=0.59)
    rows = _body_rows(_report(few, many), "Ingest through ImportTasks against the bare driver")
    assert [row[:3] for row in rows] == [["stack", "10,000", "5,252"],
                                         ["stack", "10,000,000", "5,224"]]  # fmt: skip
    assert [row[5] for row in rows] == ["0.46", "0.59"]


def _server(rss: dict[str, float], hwm: float, peak: float | None = None) -> dict[str, Any]:
    """A server process's figures; without ``peak`` as results were written before its tree
    was sampled between phases (a forked tree's summed resident set above any one member's
    high-water mark)."""
    per = {"load": 0.1, "lifecycle": 0.5, "fire": 0.4}
    figures = {"name": "server", "role": "server", "rss_mb": rss, "hwm_mb": hwm,
               "cpu_s_per_1000": per}  # fmt: skip
    return figures if peak is None else {**figures, "peak_mb": peak}


def test_the_peak_is_never_below_a_resident_set_sampled() -> None:
    run = _run("stack", 10_000, p99=1, reads=1, cpu=1, rss=88.9)
    run["processes"] = [
        _server({"start": 90.0, "loaded": 274.2, "done": 343.8}, hwm=178.9),
        _server({"loaded": 274.2, "done": 298.3}, hwm=211.7, peak=402.5),
        *run["processes"],
    ]
    rows = _body_rows(_report(run), "Processes: memory and CPU per 1,000 tasks")
    # Columns 4..6: RSS after load, RSS at end, peak (MB).
    shown = [tuple(float(cell) for cell in row[4:7]) for row in rows]
    for loaded, end, peak in shown:
        assert peak >= max(loaded, end)
    assert [peak for _, _, peak in shown] == [343.8, 402.5, 88.9]


def test_many_stored_against_few_judges_each_figure_by_its_direction() -> None:
    few = _run("stack", 10_000, p99=6_473, reads=339.5, cpu=54.4, rss=88.9, tikk=5_000.0)
    better = _run("stack", 10_000_000, p99=5_053, reads=257.9, cpu=41.2, rss=90.3, tikk=6_000.0)
    worse = _run("stack", 10_000_000, p99=7_767, reads=407.4, cpu=65.3, rss=90.3, tikk=4_000.0)
    shown = {}
    for name, many in (("better", better), ("worse", worse)):
        rows = _body_rows(_report(few, many), "Many stored against few")
        shown[name] = {row[4]: (row[5], row[-2], row[-1]) for row in rows}
    # Less lateness, fewer reads, less CPU or more ingest with many stored is within target.
    assert {figure: v[-1] for figure, v in shown["better"].items()} == {
        "tikk ingest/s": "yes", "start lateness p99 ms": "yes", "store reads/s": "yes",
        "dispatcher CPU %": "yes", "dispatcher RSS MB": "yes",
    }  # fmt: skip
    assert shown["better"] == {
        "tikk ingest/s": ("≥ -10%", "+20%", "yes"),
        "start lateness p99 ms": ("≤ +10%", "-22%", "yes"),
        "store reads/s": ("≤ +10%", "-24%", "yes"),
        "dispatcher CPU %": ("≤ +10%", "-24%", "yes"),
        "dispatcher RSS MB": ("≤ +50 MB", "+1.4 MB", "yes"),
    }
    assert {figure: v[1:] for figure, v in shown["worse"].items()} == {
        "tikk ingest/s": ("-20%", "**no**"),
        "start lateness p99 ms": ("+20%", "**no**"),
        "store reads/s": ("+20%", "**no**"),
        "dispatcher CPU %": ("+20%", "**no**"),
        "dispatcher RSS MB": ("+1.4 MB", "yes"),
    }


def _mib(rss: int, hwm: int) -> ProcSample:
    return ProcSample(cpu_s=1.0, rss_bytes=rss * 2**20, hwm_bytes=hwm * 2**20, processes=3)


def test_a_peak_is_the_largest_of_every_sample_and_member_high_water_mark() -> None:
    peaks = bench_procs.Peaks()
    peaks.note({"server": _mib(100, 90), "worker": None})
    peaks.note({"server": _mib(300, 150)})  # three processes: their sum above any one's mark
    peaks.note({"server": _mib(200, 320), "worker": _mib(40, 45)})  # a member's spike, missed
    assert peaks.bytes_of("server") == 320 * 2**20
    assert peaks.bytes_of("worker") == 45 * 2**20
    assert peaks.bytes_of("dispatcher") is None


def test_the_fleet_samples_memory_between_the_phases(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spiked = threading.Event()
    readings = iter([_mib(100, 100), _mib(900, 100)])

    def sample(pid: int) -> ProcSample:
        reading = next(readings, _mib(100, 100))
        if reading.rss_bytes > 100 * 2**20:
            spiked.set()
        return reading

    monkeypatch.setattr(bench_procs, "sample", sample)
    fleet = bench_procs.Fleet(tmp_path, {})
    proc = cast("subprocess.Popen[bytes]", SimpleNamespace(pid=0))  # sampled by the fake only
    fleet.members.append(bench_procs.TikkProcess("server", "server", proc, tmp_path / "log"))
    fleet.sample()  # a phase boundary: before the spike
    with fleet.watching(interval_s=0.01):
        assert spiked.wait(10)
    fleet.sample()  # the next boundary: after it
    assert fleet.peaks.bytes_of("server") == 900 * 2**20


def test_ingest_rates_are_drawn_as_window_means_weighted_by_time() -> None:
    # Lumpy per-second acknowledgements: 0, 4,000, 0, 4,000 … average 2,000/s.
    series = [(float(t), 4_000.0 if t % 2 else 0.0) for t in range(1, 61)]
    assert windowed(series, 30.0) == [(30.0, 2_000.0), (60.0, 2_000.0)]
    # A last, partial window is drawn too; a gap between samples counts at its rate.
    assert windowed([(1.0, 10.0), (4.0, 20.0)], 30.0) == [(4.0, 70.0 / 4.0)]
    assert windowed([], 30.0) == []


def test_the_fire_phase_shows_each_tasks_wait_between_queue_and_start() -> None:
    # Two tasks: one reached the queue 90 ms late and started at 100 (waited 10 ms there);
    # one was handed over 450 ms early and started 50 ms late (waited 500 ms). The wait is
    # per task, not the difference of the two columns' percentiles.
    runs = {"a": (1, 100, 90), "b": (1, 50, -450)}
    fire = _fire_figures(BenchConfig("embedded", 2, 100.0), runs, 1.0)
    assert fire["queue_to_start_ms"] == {"count": 2, "p50": 10, "p99": 500, "max": 500}
    run = _run("embedded", 10, p99=1, reads=1.0, cpu=1.0, rss=1.0)
    run["fire"] |= fire | {"store_reads_per_s": 1.0, "dispatcher_cpu_pct": 1.0}
    row = fire_table([run]).splitlines()[-1].split(" | ")
    assert row[-4:-2] == ["10", "500"]
    older = _run("embedded", 10, p99=1, reads=1.0, cpu=1.0, rss=1.0)  # from before the column
    assert fire_table([older]).splitlines()[-1].split(" | ")[-4:-2] == ["n/a", "n/a"]
