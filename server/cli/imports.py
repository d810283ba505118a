"""``tikk task import FILE``: JSON lines (one ``CreateTaskRequest`` each, in protobuf's JSON
mapping) through the client's ``import_tasks``, with progress, a file of rejects and resume.

Lines are answered in order (the server answers batches in the order sent), so after an
interruption ``--skip N`` resumes right after the last answered line; with task ids in the
file nothing is created twice even if a batch was stored but not yet answered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from google.protobuf import json_format

from server.cli.client import refused
from server.cli.options import EXIT_OK, EXIT_USAGE, client_options, transport
from tikk.client import Client, ClientError, ImportInterrupted, ImportResult, TransportError
from tikk.v1 import tasks_pb2

# How often the progress is written when its output is not a terminal.
_LOGGED_EVERY_S = 10.0


@dataclass
class Progress:
    """What the import has read and what the server has answered, by input line (from 1).

    The client reads the input on a thread of its own: that side only appends to ``sent``
    and ``unparsed``; every count and every write to the rejects file happens on the
    caller's thread, in line order.
    """

    total_bytes: int | None
    started: float = field(default_factory=time.monotonic)
    read_bytes: int = 0
    acknowledged_line: int = 0
    accepted: int = 0
    created: int = 0
    rejected: int = 0
    # The line of each task sent and not yet answered, oldest first.
    sent: deque[int] = field(default_factory=deque)
    # Lines that did not parse (never sent), with the reason, not yet written as rejects.
    unparsed: deque[tuple[int, str]] = field(default_factory=deque)
    _shown: float = 0.0

    def show(self, out: IO[str], *, final: bool = False) -> None:
        """The progress line: rewritten in place twice a second on a terminal; elsewhere (a
        log, a pipe) a whole line every ``_LOGGED_EVERY_S``, so no carriage return litters
        the file."""
        now = time.monotonic()
        live = out.isatty()
        if not final and now - self._shown < (0.5 if live else _LOGGED_EVERY_S):
            return
        self._shown = now
        done = self.accepted + self.rejected
        rate = done / max(now - self.started, 1e-3)
        eta = ""
        if self.total_bytes and self.read_bytes and not final:
            left = (now - self.started) * (self.total_bytes / self.read_bytes - 1)
            eta = f", {100 * self.read_bytes / self.total_bytes:.0f} % read, ETA {left:.0f} s"
        line = f"imported {done:,} ({self.rejected:,} rejected) at {rate:,.0f}/s{eta}"
        if live:
            print(f"\r{line}   ", end="\n" if final else "", file=out, flush=True)
        else:
            print(line, file=out, flush=True)


def _reject(rejects: IO[str], line: int, code: str, message: str, task_id: str = "") -> None:
    entry = {"line": line, "code": code, "message": message, "task_id": task_id}
    rejects.write(json.dumps(entry) + "\n")


def _tasks(
    source: IO[str], args: argparse.Namespace, progress: Progress
) -> Iterator[tasks_pb2.CreateTaskRequest]:
    """The input's tasks; a line that does not parse is noted as a reject, not sent."""
    for number, text in enumerate(source, start=1):
        progress.read_bytes += len(text.encode())
        if number <= args.skip or not text.strip():
            continue
        try:
            req = json_format.Parse(text, tasks_pb2.CreateTaskRequest())
        except json_format.ParseError as exc:
            progress.unparsed.append((number, f"not a CreateTaskRequest: {exc}"))
            continue
        progress.sent.append(number)
        yield req


def _write_unparsed(progress: Progress, rejects: IO[str], before: int | None = None) -> None:
    """Write the rejects of the lines that did not parse (those before line ``before``)."""
    while progress.unparsed and (before is None or progress.unparsed[0][0] < before):
        number, message = progress.unparsed.popleft()
        _reject(rejects, number, "INVALID_ARGUMENT", message)
        progress.rejected += 1


def _take(result: ImportResult, progress: Progress, rejects: IO[str]) -> None:
    """Count one task's answer and write it as a reject if it was refused."""
    line = progress.sent.popleft()
    _write_unparsed(progress, rejects, before=line)
    if result.ok:
        progress.accepted += 1
        progress.created += result.created
    else:
        _reject(rejects, line, result.code.name, result.message, result.task_id)
        progress.rejected += 1
    progress.acknowledged_line = line


def _import(args: argparse.Namespace) -> None:
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    size = None if args.file == "-" else os.path.getsize(args.file)
    progress = Progress(total_bytes=size)
    client = Client(args.server, namespace=args.namespace, transport=transport(args))
    with client, source, open(args.rejects, "a", encoding="utf-8") as rejects:
        results = client.import_tasks(_tasks(source, args, progress), batch_size=args.batch_size)
        try:
            for result in results:
                _take(result, progress, rejects)
                progress.show(sys.stderr)
        except ImportInterrupted:
            progress.show(sys.stderr, final=True)
            resume = max(progress.acknowledged_line, args.skip)
            print(f"tikk: stopped; every line up to {resume} is done: resume with --skip {resume}",
                  file=sys.stderr)  # fmt: skip
            raise
        _write_unparsed(progress, rejects)
    progress.show(sys.stderr, final=True)
    where = f" (see {args.rejects})" if progress.rejected else ""
    print(f"imported: {progress.accepted:,} accepted ({progress.created:,} created), "
          f"{progress.rejected:,} rejected{where}")  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    """The command: a refusal is exit code 1, an unreachable server 3."""
    try:
        _import(args)
    except TransportError as exc:
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClientError as exc:
        return refused(exc.cause if isinstance(exc, ImportInterrupted) else exc)
    return EXIT_OK


def register(sub: Any) -> None:
    """``task import``."""
    p = sub.add_parser("import", help="import tasks from JSON lines (a file, or - for stdin)")
    client_options(p)
    p.add_argument("file", help="one CreateTaskRequest per line in protobuf's JSON mapping")
    p.add_argument("--batch-size", type=_batch_size, default=1_000,
                   help="tasks per batch (1 to 5,000)")  # fmt: skip
    p.add_argument("--rejects", default="rejects.jsonl", help="where refused lines are written")
    p.add_argument(
        "--skip", type=int, default=0, metavar="N",
        help="resume: skip the first N lines (as printed when an import stopped)",
    )  # fmt: skip
    p.set_defaults(func=_run)


def _batch_size(text: str) -> int:
    """A usage error, not a traceback, for a batch size no import can use."""
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if size < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {size}")
    return size
