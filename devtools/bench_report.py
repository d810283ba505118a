"""What ``python -m devtools bench`` writes from its runs: ``results.json``, ``results.md``
(markdown tables), ``lateness_cdf.png`` and ``ingest_rate.png``, and the README's performance
section (between ``README_START`` and ``README_END``), regenerated from a ``results.json``.

Everything here but the plots is pure: it reads the JSON-ready mapping ``devtools.bench``
builds (``runs``: one mapping per run) and returns text. Plots need matplotlib (the ``bench``
extra), imported only when plotting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools import profiles

README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"
_CDF_POINTS = 200
# The targets of the scale benchmark (issue 12, item 6).
CASSANDRA_RATIO_TARGET, CASSANDRA_INGEST_TARGET = 0.85, 5_000.0
SAME_WITHIN, RSS_GROWTH_MB = 0.10, 50.0


def percentile(ordered: Sequence[int], q: float) -> int | None:
    """Nearest-rank percentile of an ascending sequence (``q`` in 0..1); None when empty."""
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * q // 1))  # ceil(n * q), at least the first
    return ordered[min(len(ordered), int(rank)) - 1]


def summarize(ordered: Sequence[int]) -> dict[str, int | None]:
    return {
        "count": len(ordered),
        "p50": percentile(ordered, 0.50),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1] if ordered else None,
    }


def cdf_points(ordered: Sequence[int], points: int = _CDF_POINTS) -> list[list[float]]:
    """At most ``points`` (value, share of values <= it) pairs of an ascending sequence,
    always with the largest value, so a plot of them ends at 1."""
    n = len(ordered)
    if not n:
        return []
    picks = sorted({min(n - 1, (n * i) // points) for i in range(1, points)} | {n - 1})
    return [[float(ordered[i]), (i + 1) / n] for i in picks]


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _label(run: dict[str, Any]) -> list[str]:
    rate = "burst" if run["mode"] == "burst" else _num(run["rate"])
    return [run["backend"], _num(run["stored"]), _num(run["fired"]), rate]


def _tikk_ingest(run: dict[str, Any]) -> float:
    """tikk's ingest rate: the load phase's, or with nothing stored the fire phase's import."""
    return float((run["load"] or run["fire_ingest"])["per_s"])


def ingest_table(runs: Sequence[dict[str, Any]]) -> str:
    rows = []
    for r in runs:
        tikk = _tikk_ingest(r)
        rows.append([
            r["backend"], _num(r["stored"]), _num(tikk), _num(r["ceiling"]["per_s"]),
            _num(r["ceiling"]["tasks"]), _num(r["ingest_ratio"], 2), r["ceiling"]["method"],
        ])  # fmt: skip
    header = ["backend", "stored", "tikk ingest/s", "bare driver/s", "driver rows",
              "tikk ÷ driver", "driver"]  # fmt: skip
    return _table(header, rows)


def fire_table(runs: Sequence[dict[str, Any]]) -> str:
    rows = []
    for r in runs:
        f = r["fire"]
        q, h = f["queue_ms"], f["handler_ms"]
        w = f.get("queue_to_start_ms", {})  # results of older runs have none
        rows.append([
            *_label(r), f"{_num(f['distinct'])} (+{f['duplicates']} dup, {f['missing']} missing)",
            _num(q["p50"]), _num(q["p99"]), _num(q["max"]),
            _num(h["p50"]), _num(h["p99"]), _num(h["max"]),
            _num(w.get("p50")), _num(w.get("p99")),
            _num(f["store_reads_per_s"], 1), _num(f["dispatcher_cpu_pct"], 1),
        ])  # fmt: skip
    header = ["backend", "stored", "fired", "rate/s", "ran", "queue p50", "p99", "max",
              "start p50", "p99", "max", "queue → start p50", "p99", "store reads/s",
              "dispatcher CPU %"]  # fmt: skip
    return _table(header, rows)


def process_table(runs: Sequence[dict[str, Any]]) -> str:
    rows = []
    for r in runs:
        for p in r["processes"]:
            per = p["cpu_s_per_1000"]
            rss = p["rss_mb"]
            rows.append([
                r["backend"], _num(r["stored"]), p["name"], p["role"],
                _num(rss.get("loaded"), 1), _num(rss.get("done"), 1), _num(peak_mb(p), 1),
                _num(per["load"], 3), _num(per["lifecycle"], 3), _num(per["fire"], 3),
            ])  # fmt: skip
    header = ["backend", "stored", "process", "role", "RSS after load MB", "RSS at end MB",
              "peak MB", "CPU-s/1k stored (load)", "CPU-s/1k fired (lifecycle)",
              "CPU-s/1k fired (fire phase)"]  # fmt: skip
    return _table(header, rows)


def peak_mb(process: dict[str, Any]) -> float | None:
    """The largest resident set of a process tree: the run's peak, and never below a resident
    set it sampled (results of older runs hold only the largest member's ``VmHWM``, which a
    tree of several processes exceeds)."""
    seen = [process.get("peak_mb"), process.get("hwm_mb"), *process["rss_mb"].values()]
    known = [v for v in seen if v is not None]
    return max(known) if known else None


def disk_table(runs: Sequence[dict[str, Any]]) -> str:
    rows = [
        [r["backend"], _num(r["stored"]), _num(r["disk"]["bytes"]),
         _num(r["disk"]["bytes_per_task"], 1), r["disk"]["source"],
         "yes" if r["disk"]["flushed"] else "no"]
        for r in runs if r.get("disk")
    ]  # fmt: skip
    return _table(["backend", "stored", "bytes", "bytes/task", "measured", "flushed"], rows)


def _dispatcher_rss(run: dict[str, Any]) -> float | None:
    """The largest resident set of a dispatching process at the end of the fire phase."""
    sizes = [p["rss_mb"].get("done") for p in run["processes"] if "dispatcher" in p["role"]]
    known = [s for s in sizes if s is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class Compared:
    """A figure of the run with many stored set against the run with few: which way is
    better, and how far the other way it may move. ``allowed`` is a share of the few-stored
    figure, or with ``in_units`` an amount in the figure's own unit."""

    name: str
    read: Callable[[dict[str, Any]], float | None]
    lower_is_better: bool
    allowed: float = SAME_WITHIN
    in_units: bool = False

    def target(self) -> str:
        """The bound as the table shows it: ``≤ +10%`` where lower is better."""
        sign = "+" if self.lower_is_better else "-"
        bound = f"{self.allowed:,.0f} MB" if self.in_units else f"{self.allowed:.0%}"
        return f"{'≤' if self.lower_is_better else '≥'} {sign}{bound}"

    def judge(self, few: float | None, many: float | None) -> tuple[str, bool | None]:
        """The change from ``few`` to ``many`` as shown, and whether it is within target:
        any move the better way is."""
        if few is None or many is None or (few == 0 and not self.in_units):
            return "n/a", None
        change = many - few if self.in_units else (many - few) / few
        worse = change if self.lower_is_better else -change
        shown = f"{change:+,.1f} MB" if self.in_units else f"{change:+.0%}"
        return shown, worse <= self.allowed


# What many stored must not worsen: ingest is better higher, the rest lower.
COMPARED = (
    Compared("tikk ingest/s", _tikk_ingest, lower_is_better=False),
    Compared("start lateness p99 ms", lambda r: r["fire"]["handler_ms"]["p99"],
             lower_is_better=True),
    Compared("store reads/s", lambda r: r["fire"]["store_reads_per_s"], lower_is_better=True),
    Compared("dispatcher CPU %", lambda r: r["fire"]["dispatcher_cpu_pct"],
             lower_is_better=True),
    Compared("dispatcher RSS MB", _dispatcher_rss, lower_is_better=True,
             allowed=RSS_GROWTH_MB, in_units=True),
)  # fmt: skip


def _verdict(ok: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "n/a"}[ok]


def comparison_rows(runs: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Per backend and mode: the run with the most stored against the one with the fewest."""
    rows = []
    for key in sorted({(r["backend"], r["mode"]) for r in runs}):
        group = sorted((r for r in runs if (r["backend"], r["mode"]) == key),
                       key=lambda r: r["stored"])  # fmt: skip
        base, big = group[0], group[-1]
        if base["stored"] == big["stored"]:
            continue
        for figure in COMPARED:
            few, many = figure.read(base), figure.read(big)
            change, ok = figure.judge(few, many)
            rows.append([*key, _num(base["stored"]), _num(big["stored"]), figure.name,
                         figure.target(), _num(few, 1), _num(many, 1), change,
                         _verdict(ok)])  # fmt: skip
    return rows


def comparison_table(runs: Sequence[dict[str, Any]]) -> str:
    rows = comparison_rows(runs)
    if not rows:
        return "No two runs of one backend with different stored counts (see --baseline-stored)."
    header = ["backend", "mode", "stored (few)", "stored (many)", "figure", "target", "few",
              "many", "change", "within target"]  # fmt: skip
    return _table(header, rows)


def target_rows(runs: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Ingest against the bare driver: Cassandra's targets, SQLite's share for the record."""
    rows = []
    for r in runs:
        tikk = _tikk_ingest(r)
        ratio = r["ingest_ratio"]
        if r["backend"] == "stack":
            ok = ratio is not None and ratio >= CASSANDRA_RATIO_TARGET
            ok = ok and tikk >= CASSANDRA_INGEST_TARGET
            target = f"≥ {CASSANDRA_RATIO_TARGET} and ≥ {CASSANDRA_INGEST_TARGET:,.0f}/s"
        else:
            ok, target = None, "(share of bare SQLite, no target)"
        rows.append([r["backend"], _num(r["stored"]), _num(tikk), _num(ratio, 2), target,
                     _verdict(ok)])  # fmt: skip
    return rows


TARGET_HEADER = ("backend", "stored", "tikk ingest/s", "tikk ÷ driver", "target", "met")


def render_markdown(results: dict[str, Any]) -> str:
    """The tables of ``results.md`` (also the body of the README section)."""
    runs = results["runs"]
    host = results.get("host", {})
    parts = [
        f"Run {results.get('started_utc', '?')} on {host.get('cpus', '?')} CPUs, "
        f"{host.get('mem_gib', '?')} GiB; `{results.get('command', 'python -m devtools bench')}`. "
        "Lateness in ms (queue: due → handed to the queue; start: due → handler start; "
        "queue → start: each task's wait between the two, the workers' side); "
        "CPU % is of one core.",
        "### Ingest through ImportTasks against the bare driver\n\n" + ingest_table(runs),
        _table(TARGET_HEADER, target_rows(runs)),
        "### Fire phase\n\n" + fire_table(runs),
        "### Many stored against few\n\n" + comparison_table(runs),
        "### Processes: memory and CPU per 1,000 tasks\n\n" + process_table(runs),
        "### Bytes on disk per stored task\n\n" + disk_table(runs),
        *profile_sections(runs),
    ]
    return "\n\n".join(parts) + "\n"


def profile_sections(runs: Sequence[dict[str, Any]]) -> list[str]:
    """For each run recorded with ``--profile``: where each process's CPU went."""
    return [
        f"### Where the time goes: {r['backend']}, {r['stored']:,} stored (py-spy, fire phase)"
        "\n\n" + "\n".join(profiles.render(r["profile"]))
        for r in runs
        if r.get("profile")
    ]


def readme_section(results: dict[str, Any], plots: Sequence[str] = ()) -> str:
    """The README's regenerated performance figures, markers included; ``plots`` are paths
    of images (relative to the README) shown below the tables."""
    images = "".join(f"\n![{Path(p).stem.replace('_', ' ')}]({p})\n" for p in plots)
    return (
        f"{README_START}\n<!-- Generated by `python -m devtools bench-readme` from results.json "
        f"files; edit devtools/bench_report.py, not this text. -->\n\n"
        f"{render_markdown(results)}{images}"
        f"{README_END}"
    )


def merge_results(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' results as one (e.g. each backend run on its own): runs in order, the
    commands joined, the first start time and host."""
    if not parts:
        raise ValueError("no results to merge")
    merged = dict(parts[0])
    merged["runs"] = [run for part in parts for run in part["runs"]]
    commands = (part.get("command", "python -m devtools bench") for part in parts)
    merged["command"] = "; ".join(str(command) for command in commands)
    return merged


def replace_section(readme: str, section: str) -> str:
    """``readme`` with the text between the markers (markers included) replaced by
    ``section``. Raises ``ValueError`` unless each marker appears once, start before end."""
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start or readme.count(README_START) + readme.count(README_END) != 2:
        raise ValueError(f"the README must hold {README_START} … {README_END} once, in order")
    return readme[:start] + section + readme[end + len(README_END) :]


def write_outputs(results: dict[str, Any], out: Path) -> list[Path]:
    """results.json, results.md and the two plots in ``out``; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json", out / "results.md"]
    written[0].write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    title = "# python -m devtools bench\n\n"
    written[1].write_text(title + render_markdown(results), encoding="utf-8")
    return written + write_plots(results["runs"], out)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "the benchmark's plots need matplotlib: pip install 'tikk[bench]'"
        ) from exc
    return plt


def _run_name(run: dict[str, Any]) -> str:
    return f"{run['backend']}, {run['stored']:,} stored"


def write_plots(runs: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """lateness_cdf.png (due → handler start and → queue) and ingest_rate.png."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        for kind, style in (("handler_ms", "-"), ("queue_ms", ":")):
            points = r["cdf"][kind]
            label = f"{_run_name(r)}: {'start' if kind == 'handler_ms' else 'queue'}"
            ax.plot([max(p[0], 1) for p in points], [p[1] for p in points], style, label=label)
    ax.set(xscale="log", xlabel="lateness after due, ms (log; 0 drawn at 1)",
           ylabel="share of tasks", title="Lateness CDF")  # fmt: skip
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    cdf = out / "lateness_cdf.png"
    fig.savefig(cdf, dpi=100)
    plt.close(fig)
    return [cdf, _plot_ingest(plt, runs, out)]


# Acknowledgements arrive in lumps of whole batches, so per-second rates swing between zero
# and several times the mean; a window this wide shows the trend a reader looks for.
INGEST_WINDOW_S = 30.0


def windowed(series: Sequence[Sequence[float]], window_s: float) -> list[tuple[float, float]]:
    """Per-second samples ``(t, rate)`` (each the rate since the previous sample) as the mean
    rate of each ``window_s`` window, drawn at the window's end."""
    points: list[tuple[float, float]] = []
    done, start, last_t = 0.0, 0.0, 0.0
    for t, rate in series:
        done += rate * (t - last_t)
        last_t = t
        if t - start >= window_s:
            points.append((t, done / (t - start)))
            done, start = 0.0, t
    if last_t > start:
        points.append((last_t, done / (last_t - start)))
    return points


def _plot_ingest(plt: Any, runs: Sequence[dict[str, Any]], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in runs:
        series = windowed((r["load"] or {}).get("series") or [], INGEST_WINDOW_S)
        ax.plot([p[0] for p in series], [p[1] for p in series], label=_run_name(r))
    ax.set(xlabel="seconds into the load",
           ylabel=f"tasks/s acknowledged (mean of each {INGEST_WINDOW_S:.0f} s)",
           title="Ingest rate through ImportTasks")  # fmt: skip
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    rate = out / "ingest_rate.png"
    fig.savefig(rate, dpi=100)
    plt.close(fig)
    return rate


def load_results(path: Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return results


def check_plotting() -> None:
    """Raise the ``ImportError`` the plots would, before a long run rather than after it."""
    _pyplot()


def command_line(argv: list[str]) -> str:
    """The command as run, for the report, without ``--out``: where the results went is
    a local detail, not part of how the figures were made."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip or arg.startswith("--out="):
            skip = False
        elif arg == "--out":
            skip = True
        else:
            kept.append(arg)
    return " ".join(["python -m devtools", *kept])
