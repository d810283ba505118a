"""The ``tikk`` command line: run the processes, and talk to a server as a client (through
``tikk.client``). The tools for developing tikk are ``python -m devtools`` in the checkout.

Exit codes: 0 ok, 1 the server refused the request, 2 bad usage, 3 server unreachable,
4 the worker module could not be loaded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from server.cli import (
    auth,
    bulk,
    certs,
    delivery_keys,
    processes,
    queues,
    quotas,
    schedules,
    tasks,
)
from server.cli.options import EXIT_USAGE
from server.log_format import configure_logging
from tikk.errors import InvalidArgument


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tikk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # In this order in the help: the processes, the tools, then the client commands.
    for commands in (
        processes,
        certs,
        delivery_keys,
        auth,
        tasks,
        schedules,
        queues,
        bulk,
        quotas,
    ):
        commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Log lines carry request text (run ids, task ids, errors): one escaped, bounded line each.
    configure_logging(getattr(args, "log_format", None))
    try:
        code: int = args.func(args)
    except InvalidArgument as exc:
        # A bad option value found while starting (a URL, an exporter): say which, no trace.
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code
