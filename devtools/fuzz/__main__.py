"""``python -m devtools.fuzz --minutes N``: the fuzz target of the CI test, for longer.

Starts ``tikk dev`` on a free loopback port in a temporary directory (``--server-arg`` adds to
its command line), then goes round every RPC, each time a batch of generated messages and a
batch of raw bytes, until the time is up. Each failing input is shrunk by hypothesis and
reported once per RPC, as is every traceback the server printed; the exit code is 1 if any
call ended badly, the server printed a traceback or stopped serving. A credential for a
server run with ``--auth`` comes from ``$TIKK_FUZZ_TOKEN`` (never the command line);
``--root-cert`` turns TLS on.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from devtools.fuzz.messages import serialized_requests
from devtools.fuzz.target import (
    FORBIDDEN,
    Connection,
    Rpc,
    ServerProcess,
    all_rpcs,
    call,
    seed,
    serving,
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m devtools.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=5.0, help="how long to run (default 5)")
    p.add_argument("--examples", type=int, default=200, help="inputs per RPC and kind per round")
    p.add_argument("--server-arg", action="append", default=[], help="added to tikk dev's line")
    p.add_argument("--root-cert", help="PEM file of the CA of the server's certificate (TLS)")
    return p.parse_args(argv)


class _Hunt:
    """One server under fuzz; ``round`` runs one batch for one RPC and kind."""

    def __init__(self, server: ServerProcess, conn: Connection, examples: int) -> None:
        self.server, self.conn, self.channel = server, conn, conn.channel()
        self.examples = examples
        self.failures: dict[str, str] = {}
        self.calls = 0

    def round(self, rpc: Rpc, raw: bool) -> None:
        key = f"{rpc.path} ({'raw bytes' if raw else 'messages'})"
        if key in self.failures:
            return

        @settings(
            max_examples=self.examples, deadline=None, database=None,
            suppress_health_check=list(HealthCheck),
        )  # fmt: skip
        @given(serialized_requests(rpc.request, rpc.client_streaming, raw=raw))
        def check(requests: list[bytes]) -> None:
            self.calls += 1
            code = call(self.channel, self.conn, rpc, requests)
            if code in FORBIDDEN or not self.server.alive():
                shown = repr(requests)[:2_000]
                raise AssertionError(f"{code.name}, server alive: {self.server.alive()}; {shown}")

        try:
            check()
        except AssertionError as exc:
            self.failures[key] = f"{exc}\n--- server output ---\n{self.server.output(30)}"


def _run(args: argparse.Namespace, data_dir: Path) -> int:
    deadline = time.monotonic() + args.minutes * 60
    root = Path(args.root_cert).read_bytes() if args.root_cert else None
    with ServerProcess(data_dir, args.server_arg) as server:
        conn = Connection(server.address(), os.environ.get("TIKK_FUZZ_TOKEN", ""), root)
        hunt, rounds = _Hunt(server, conn, args.examples), 0
        seed(hunt.channel, conn)
        while time.monotonic() < deadline and server.alive():
            for rpc in all_rpcs():
                for raw in (False, True):
                    if time.monotonic() < deadline:
                        hunt.round(rpc, raw)
            rounds += 1
        healthy = server.alive() and serving(hunt.channel, conn)
        for i, traceback in enumerate(server.tracebacks()):
            hunt.failures[f"unhandled exception {i + 1} in the server"] = traceback
    return _report(hunt, rounds, healthy)


def _report(hunt: _Hunt, rounds: int, healthy: bool) -> int:
    print(f"fuzz: {hunt.calls} calls in {rounds} round(s); server serving at the end: {healthy}")
    for key, detail in sorted(hunt.failures.items()):
        print(f"\nFAILED {key}: {detail}")
    if not hunt.failures:
        print("no call ended in " + ", ".join(sorted(c.name for c in FORBIDDEN)))
    return 1 if hunt.failures or not healthy else 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="tikk-fuzz-") as data_dir:
        return _run(args, Path(data_dir))


if __name__ == "__main__":
    sys.exit(main())
