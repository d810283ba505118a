"""``python -m devtools bench-peers``: its options, the check of what the systems asked for
need, and the loop over every workload, system and run (each on a fresh instance).

Exit codes as ``python -m devtools``: 0 done (a system that failed is shown as failed in the
tables), 1 something the asked-for systems need is missing, 2 bad usage.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from devtools.peers.report import peers_markdown, write_peer_results
from devtools.peers.requirements import SYSTEMS, missing_requirements, unknown_systems
from devtools.peers.runner import run_once
from devtools.peers.workloads import WORKLOADS
from server.cli.options import EXIT_OK, EXIT_REFUSED, EXIT_USAGE

_DISTRIBUTIONS = {
    "tikk": ("tikk",), "celery": ("celery", "kombu", "redis"), "arq": ("arq", "redis"),
    "apscheduler": ("apscheduler", "sqlalchemy"), "redis-poller": ("redis",),
}  # fmt: skip


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workloads", default="A,B,C,D", help="comma list of A, B, C, D")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma list of {', '.join(SYSTEMS)}"
    )
    parser.add_argument(
        "--scale", type=float, default=1.0,
        help="multiplies each workload's task count (0.1: a quick try)",
    )  # fmt: skip
    parser.add_argument("--runs", type=int, default=1, help="runs of each system per workload")
    parser.add_argument("--out", help="results folder (default: bench-results/peers-<UTC time>)")


def _listed(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _usage_errors(args: argparse.Namespace) -> list[str]:
    errors = [f"unknown system {s!r}" for s in unknown_systems(_listed(args.systems))]
    errors += [f"unknown workload {w!r}" for w in _listed(args.workloads) if w not in WORKLOADS]
    if not _listed(args.systems) or not _listed(args.workloads):
        errors.append("no system or no workload asked for")
    if args.scale <= 0 or args.runs < 1:
        errors.append("--scale must be above 0 and --runs at least 1")
    return errors


def run_command(args: argparse.Namespace) -> int:
    prog = "python -m devtools bench-peers"
    if errors := _usage_errors(args):
        print(f"{prog}: " + "; ".join(errors), file=sys.stderr)
        return EXIT_USAGE
    if missing := missing_requirements(_listed(args.systems)):
        for line in missing:
            print(f"{prog}: {line}", file=sys.stderr)
        return EXIT_REFUSED
    # A timeout's SIGTERM unwinds like Ctrl-C, so every started process is stopped.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    started = datetime.now(UTC)
    out = Path(args.out or f"bench-results/peers-{started:%Y%m%dT%H%M%SZ}")
    results = _results_frame(args, started)
    _run_all(args, results, out)
    print(peers_markdown(results))
    print(f"bench-peers: results in {out}/")
    return EXIT_OK


def _raise_interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _run_all(args: argparse.Namespace, results: dict[str, Any], out: Path) -> None:
    """Every run, in order; the results written after each one."""
    ingest_rates: dict[str, float] = {}  # the last measured: the next workload's lead
    for name in results["workloads"]:
        workload = WORKLOADS[name].scaled(args.scale)
        for system in results["systems"]:
            for run in range(1, args.runs + 1):
                print(f"bench-peers: {name} ({workload.describe()}): {system}, run {run} ...",
                      flush=True)  # fmt: skip
                figures = run_once(system, workload, run, ingest_rates.get(system))
                if figures.get("ingest_per_s"):
                    ingest_rates[system] = figures["ingest_per_s"]
                results["runs"].append(figures)
                write_peer_results(results, out)
                print(f"bench-peers:   {_brief(figures)}", flush=True)


def _brief(figures: dict[str, Any]) -> str:
    if "error" in figures:
        error: str = figures["error"]
        return "failed: " + error.splitlines()[0][:200]
    keys = ("p50_ms", "p99_ms", "lost", "duplicates", "ingest_per_s", "cpu_s", "peak_rss_mb")
    return ", ".join(f"{k} {figures.get(k)}" for k in keys)


def _results_frame(args: argparse.Namespace, started: datetime) -> dict[str, Any]:
    from devtools.bench import host
    from devtools.bench_report import command_line

    workloads = _listed(args.workloads)
    systems = _listed(args.systems)
    return {
        "schema": 1, "started_utc": f"{started:%Y-%m-%dT%H:%M:%SZ}",
        "command": command_line(args.argv), "host": host(),
        "scale": args.scale, "run_count": args.runs, "workloads": workloads, "systems": systems,
        "workload_text": {w: WORKLOADS[w].scaled(args.scale).describe() for w in workloads},
        "versions": _versions(systems), "runs": [],
    }  # fmt: skip


def _versions(systems: list[str]) -> dict[str, str]:
    found = {}
    for dist in sorted({d for s in systems for d in _DISTRIBUTIONS[s]}):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "?"
    if any(s in ("celery", "arq", "redis-poller") for s in systems):
        found["redis-server"] = _redis_server_version()
    return found


def _redis_server_version() -> str:
    try:
        done = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                              timeout=10, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    words = [w for w in done.stdout.split() if w.startswith("v=")]
    return words[0][2:] if words else "?"
