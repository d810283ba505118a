"""``python -m devtools COMMAND``: the tools for developing tikk, run from the checkout.

``stack`` starts and stops the local Cassandra + Kafka + ZooKeeper; ``bench``,
``bench-readme``, ``bench-schedules`` and ``bench-console`` measure tikk and write the
README's figures;
``bench-peers`` runs tikk beside Celery, arq, APScheduler and a bare Redis poller;
``faults`` and ``fuzz`` are ``python -m devtools.faults`` and ``python -m devtools.fuzz``.
They need the checkout (``infra/``, ``examples/``, the tests), so they are not commands of the
installed ``tikk``. Exit codes: 0 ok, 1 refused or failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from server.cli.options import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, backend_options, settings
from tikk.errors import InvalidArgument

PROG = "python -m devtools"
# Commands with a parser of their own: the rest of the line is theirs.
_PASSED_ON = {
    "faults": "the fault-injection suite (python -m devtools.faults --help)",
    "fuzz": "the API fuzzer (python -m devtools.fuzz --help)",
}


def _bench_configs(args: argparse.Namespace) -> list[Any]:
    """One run per backend, after a run with ``--baseline-stored`` tasks stored if asked."""
    from devtools.bench import BenchConfig

    if args.smoke:
        args.backends, args.stored, args.tasks, args.rate = "embedded", 2_000, 500, 50.0
        args.workers = 1
    rate = 0.0 if args.burst else args.rate
    configs = []
    for backend in args.backends.split(","):
        for stored in ([args.baseline_stored] if args.baseline_stored else []) + [args.stored]:
            configs.append(BenchConfig(
                backend, args.tasks, rate, stored, args.workers, args.dispatchers, args.shards,
                args.ceiling_tasks, tuple(args.server_arg), args.keep_keyspace,
                *([Path(args.cassandra_data)] if args.cassandra_data else []), tls=args.tls,
                profile=Path(args.profile) / f"{backend}-{stored}" if args.profile else None,
            ))  # fmt: skip
    return configs


def _run_bench(args: argparse.Namespace) -> int:
    from devtools.bench import results_of, run_one
    from devtools.bench_report import (
        check_plotting,
        command_line,
        render_markdown,
        write_outputs,
    )

    check_plotting()  # before a long run, not after it
    started = datetime.now(UTC)
    out = Path(args.out or f"bench-results/{started:%Y%m%dT%H%M%SZ}")
    runs = []
    for cfg in _bench_configs(args):
        what = "a burst" if cfg.mode == "burst" else f"{cfg.rate:g}/s"
        print(f"bench: {cfg.backend}: {cfg.stored:,} stored, {cfg.tasks:,} fired at {what} ...",
              flush=True)  # fmt: skip
        runs.append(run_one(cfg))
    results = results_of(runs, command_line(args.argv), f"{started:%Y-%m-%dT%H:%M:%SZ}")
    write_outputs(results, out)
    print(render_markdown(results))
    print(f"bench: results in {out}/")
    return EXIT_OK


def _run_bench_readme(args: argparse.Namespace) -> int:
    from devtools.bench_report import (
        load_results,
        merge_results,
        readme_section,
        replace_section,
        write_plots,
    )  # fmt: skip

    readme = Path(args.readme)
    try:
        results = merge_results([load_results(Path(r)) for r in args.results])
        if args.plots:
            Path(args.plots).mkdir(parents=True, exist_ok=True)
        plots = write_plots(results["runs"], Path(args.plots)) if args.plots else []
        shown = [os.path.relpath(p, readme.resolve().parent) for p in plots]
        section = readme_section(results, shown)
        text = replace_section(readme.read_text(encoding="utf-8"), section)
    except (OSError, ValueError, KeyError) as exc:
        print(f"{PROG} bench-readme: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    readme.write_text(text, encoding="utf-8")
    print(f"bench-readme: {readme} regenerated from {', '.join(args.results)}")
    return EXIT_OK


def _run_bench_schedules(args: argparse.Namespace) -> int:
    from devtools.bench_schedules import print_result, run

    print_result(asyncio.run(run(settings(args), args.schedules, args.lead)))
    return EXIT_OK


def _run_bench_console(args: argparse.Namespace) -> int:
    import json
    import time

    from devtools.bench_console import ConsoleBenchConfig, describe, run, table

    cfg = ConsoleBenchConfig(
        args.backend, args.stored, args.succeeded, args.dead, args.rounds, args.shards,
        args.keyspace, args.keep,
    )  # fmt: skip
    began = time.monotonic()
    times = run(cfg)
    lines = list(table(cfg, times, time.monotonic() - began))
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "console.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        figures = {"config": cfg.__dict__, "pages": describe(times)}
        (out / "console.json").write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return EXIT_OK


def _run_stack(args: argparse.Namespace) -> int:
    from devtools import stack, stack_launch

    try:
        if args.action == "up":
            count = args.nodes or 1
            stack_launch.up(args.services or None, fresh=args.fresh, plain=args.plain, count=count)
            print("\nbackend URLs for tikk (passwords are in the files named):")
            for name, url in stack.urls(count=count).items():
                print(f"  --{name.removesuffix('_url').replace('_', '-')} {url}")
        elif args.action == "down":
            stack_launch.down(args.nodes)
        else:
            return EXIT_OK if stack_launch.status(args.nodes or 1) else EXIT_REFUSED
    except stack.StackError as exc:
        print(f"{PROG} stack: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _stack_command(sub)
    _bench_command(sub)
    _bench_readme_command(sub)
    _bench_schedules_command(sub)
    _bench_console_command(sub)
    _bench_peers_command(sub)
    for name, text in _PASSED_ON.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def _stack_command(sub: Any) -> None:
    p = sub.add_parser("stack", help="the local Cassandra + Kafka + ZooKeeper stack")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("services", nargs="*", help="cassandra, kafka, zookeeper (default: all)")
    p.add_argument("--fresh", action="store_true", help="wipe the services' data first")
    p.add_argument(
        "--plain",
        action="store_true",
        help="start the services without authentication or TLS (default: both on)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        choices=[1, 3],
        help="nodes of each service: 1 (the default stack) or 3 (the replicated one, on "
        "127.0.0.11-33); down without it stops both",
    )
    p.set_defaults(func=_run_stack)


def _profile_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profile", metavar="DIR",
        help="record every process with py-spy during the fire phase into DIR, and report "
        "where the time goes",
    )  # fmt: skip


def _bench_command(sub: Any) -> None:
    """``bench``: its options (the old ones keep their meaning)."""
    p = sub.add_parser(
        "bench", help="the scale benchmark: ingest, lateness, reads, CPU, memory, disk"
    )
    p.add_argument("--backends", default="embedded,stack", help="comma list: embedded, stack")
    p.add_argument("--tasks", type=int, default=20_000, help="tasks fired in the fire phase")
    p.add_argument("--rate", type=float, default=2_000.0, help="fires per second")
    p.add_argument("--burst", action="store_true", help="fire every task at one instant")
    p.add_argument("--stored", type=int, default=0, help="tasks loaded first, due a day later")
    p.add_argument(
        "--baseline-stored", type=int, default=0,
        help="also run with this many stored first (e.g. 10000), to compare against",
    )  # fmt: skip
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--dispatchers", type=int, default=2, help="stack only")
    p.add_argument("--shards", type=int, default=64)
    p.add_argument(
        "--ceiling-tasks", type=int, default=200_000,
        help="rows the bare driver writes for the ceiling (at most the run's load)",
    )  # fmt: skip
    p.add_argument(
        "--server-arg", action="append", default=[], metavar="ARG",
        help="an extra argument for the server command (repeat it), e.g. --server-arg=--processes"
        " --server-arg=4",
    )  # fmt: skip
    p.add_argument("--keep-keyspace", action="store_true", help="stack: keep the run's data")
    p.add_argument(
        "--cassandra-data", metavar="DIR",
        help="the node's data folder, for bytes on disk (default: the local stack's)",
    )  # fmt: skip
    p.add_argument("--out", help="results folder (default: bench-results/<UTC time>)")
    p.add_argument("--tls", action="store_true", help="server, clients and workers over TLS")
    _profile_option(p)
    p.add_argument(
        "--smoke", action="store_true",
        help="a one-minute check: embedded, 2,000 stored, 500 fired at 50/s, 1 worker",
    )  # fmt: skip
    p.set_defaults(func=_run_bench)


def _bench_readme_command(sub: Any) -> None:
    p = sub.add_parser(
        "bench-readme", help="regenerate the README's performance section from a results.json"
    )
    p.add_argument("results", nargs="+", help=f"results.json files written by {PROG} bench")
    p.add_argument("--plots", help="also draw the plots of all runs into this folder and show "
                   "them in the section (e.g. docs/bench)")  # fmt: skip
    p.add_argument("--readme", default="README.md")
    p.set_defaults(func=_run_bench_readme)


def _bench_schedules_command(sub: Any) -> None:
    p = sub.add_parser(
        "bench-schedules", help="N schedules firing at one instant: step rate and lateness"
    )
    backend_options(p)
    p.add_argument("--schedules", type=int, default=10_000)
    p.add_argument("--lead", type=float, default=20.0, help="seconds until they fire")
    p.set_defaults(func=_run_bench_schedules)


def _bench_console_command(sub: Any) -> None:
    p = sub.add_parser("bench-console", help="the console's page times with many tasks stored")
    p.add_argument("--backend", choices=["embedded", "stack"], default="embedded")
    p.add_argument("--stored", type=int, default=1_000_000, help="tasks written first")
    p.add_argument("--succeeded", type=int, default=2_000, help="tasks run through a worker")
    p.add_argument("--dead", type=int, default=2_500, help="tasks that dead-letter")
    p.add_argument("--rounds", type=int, default=30, help="times each page is asked")
    p.add_argument("--shards", type=int, default=64)
    p.add_argument("--out", help="also write console.md and console.json into this folder")
    p.add_argument("--keep", action="store_true", help="stack: keep the keyspace it filled")
    p.add_argument("--keyspace", default="", help="stack: time again a keyspace kept before")
    p.set_defaults(func=_run_bench_console)


def _bench_peers_command(sub: Any) -> None:
    from devtools.peers.cli import add_options, run_command

    p = sub.add_parser(
        "bench-peers",
        help="tikk beside Celery, arq, APScheduler and a Redis poller (devtools/peers)",
    )
    add_options(p)
    p.set_defaults(func=run_command)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in _PASSED_ON:
        tool = importlib.import_module(f"devtools.{args[0]}.__main__")
        code: int = tool.main(args[1:])
        return code
    logging.basicConfig(
        level=os.environ.get("TIKK_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    parsed = build_parser().parse_args(args)
    parsed.argv = args  # the command as given, for the bench's report
    try:
        done: int = parsed.func(parsed)
    except InvalidArgument as exc:  # a bad option value found while starting (a URL)
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return done


if __name__ == "__main__":
    raise SystemExit(main())
