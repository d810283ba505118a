"""``python -m devtools.faults --mode ci``, ``--mode soak --duration 60m``, ``--mode storm``
(``--duration`` optional, 5 minutes by default) or ``--mode storm-ci`` (a two-minute storm);
on the replicated stack ``--mode replicated-ci``, ``replicated``, ``replicated-storm`` and
``replicated-rolling``.

Runs against the stack of ``devtools.stack`` (``python -m devtools stack up``, with
``--nodes 3`` for the replicated modes; its ports and folder follow
``TIKK_STACK_PORT_OFFSET`` and ``TIKK_STACK_DIR``). Exit codes: 0 no violation,
1 violations found, 2 bad usage, 3 the run could not be carried out (or hit its hard timeout).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from devtools.faults import modes
from devtools.faults.checker import check
from devtools.faults.modes import Mode
from devtools.faults.nemesis import FaultSchedule
from devtools.faults.records import read_history
from devtools.faults.report import RunInfo, render
from devtools.faults.suite import RECORDS_FILE, run_suite
from server.cli.options import parse_duration_ms

EXIT_PASSED, EXIT_VIOLATIONS, EXIT_USAGE, EXIT_NOT_RUN = 0, 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m devtools.faults", description=__doc__)
    p.add_argument("--mode", choices=[*_MODES, *_SIZED], default="ci")
    p.add_argument(
        "--duration",
        type=parse_duration_ms,
        help="soak (required), storm, replicated and replicated-storm (default 5m), "
        "replicated-rolling (default 7m) only, "
        "e.g. 30m or 1h",
    )
    p.add_argument("--seed", type=int, help="repeat a run's plan (default: random)")
    p.add_argument("--rate", type=float, help="tasks created per second (default: the mode's)")
    p.add_argument("--timeout", type=parse_duration_ms, help="hard limit of the whole run")
    p.add_argument("--workdir", type=Path, help="records and process logs (default: a temp dir)")
    p.add_argument(
        "--no-service-faults",
        action="store_true",
        help="leave Kafka and Cassandra alone (only processes of the cluster are hit)",
    )
    p.add_argument("--keep-data", action="store_true", help="keep the keyspace, topics, chroot")
    p.add_argument(
        "--git-rev",
        help="run tikk's packages as committed at this revision (default: the working tree)",
    )
    p.add_argument(
        "--recheck",
        type=Path,
        metavar="WORKDIR",
        help="check the records a finished run left in WORKDIR again and print the report",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="the cluster serves TLS (a development CA); workers and the suite's clients trust it",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log every fault as it happens")
    return p


# The modes of a fixed length, and those that take --duration.
_MODES: dict[str, Callable[[], Mode[Any]]] = {
    "ci": modes.ci,
    "storm-ci": modes.storm_ci,
    "replicated-ci": modes.replicated_ci,
}
_SIZED: dict[str, Callable[..., Mode[Any]]] = {
    "soak": modes.soak,
    "storm": modes.storm,
    "replicated": modes.replicated,
    "replicated-storm": modes.replicated_storm,
    "replicated-rolling": modes.replicated_rolling,
}


def _base_mode(name: str, duration_ms: int | None) -> Mode[FaultSchedule]:
    """The mode called ``name``, ``duration_ms`` long where it takes a length (five minutes
    unless it is a soak, which needs one)."""
    if name in _MODES:
        if duration_ms is not None:
            raise ValueError(f"--duration is not for --mode {name}: it has a fixed length")
        return _MODES[name]()
    if duration_ms is None and name == "soak":
        raise ValueError("--mode soak needs --duration (e.g. 60m)")
    # Each of the others has a length of its own by default.
    return _SIZED[name]() if duration_ms is None else _SIZED[name](duration_ms / 1000)


def mode_of(args: argparse.Namespace) -> Mode[FaultSchedule]:
    """The mode the options ask for; raises ``ValueError`` on a bad combination."""
    mode = _base_mode(args.mode, args.duration)
    if args.rate is not None:
        mode = replace(mode, workload=replace(mode.workload, rate_per_s=args.rate))
    if args.timeout is not None:
        mode = replace(mode, timeout_s=args.timeout / 1000)
    return mode.without_service_faults() if args.no_service_faults else mode


def recheck(workdir: Path) -> int:
    """The report of a finished run, from its records (e.g. after the checker changed)."""
    history = read_history(workdir / RECORDS_FILE, workdir / "starts.jsonl")
    result = check(history)
    info = RunInfo("recheck", 0, 0.0, str(workdir), len(history.creates), 0.0)
    print(render(result, info), flush=True)
    return EXIT_VIOLATIONS if result.failed else EXIT_PASSED


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The drivers' advice about their own configuration is noise here.
    for noisy in ("cassandra", "kazoo", "aiokafka"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    if args.recheck is not None:
        return recheck(args.recheck)
    try:
        mode = mode_of(args)
    except ValueError as exc:
        print(f"devtools.faults: {exc}", file=sys.stderr)
        return EXIT_USAGE
    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tikk-faults-"))
    print(f"fault suite: mode {mode.name}, seed {seed}, records in {workdir}", flush=True)
    try:
        result = run_suite(
            mode, seed=seed, workdir=workdir, keep_data=args.keep_data, git_rev=args.git_rev,
            tls=args.tls,
        )  # fmt: skip
    except Exception as exc:
        print(f"devtools.faults: the run could not be carried out: {exc}", file=sys.stderr)
        return EXIT_NOT_RUN
    print(result.report, flush=True)
    if result.info.incomplete is not None:
        return EXIT_NOT_RUN
    return EXIT_VIOLATIONS if result.check.failed else EXIT_PASSED


if __name__ == "__main__":
    raise SystemExit(main())
