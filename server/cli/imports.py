"""``tikk task import FILE``: JSON lines (one ``CreateTaskRequest`` each, in protobuf's JSON
mapping) through the ``ImportTasks`` stream, with progress, a file of rejects and resume.

Lines are acknowledged in order (the server answers batches in the order sent), so after an
interruption ``--skip N`` resumes right after the last acknowledged line; with task ids in
the file nothing is created twice even if a batch was stored but not yet acknowledged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import grpc
from google.protobuf import json_format

from server.cli.client import client
from server.cli.options import client_options
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

_OK = grpc.StatusCode.OK.value[0]
_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


@dataclass
class Progress:
    """What the import has sent and what the server has answered, by input line (from 1)."""

    total_bytes: int | None
    started: float = field(default_factory=time.monotonic)
    read_bytes: int = 0
    acknowledged_line: int = 0
    accepted: int = 0
    created: int = 0
    rejected: int = 0
    # batch id (its first line) -> the line of each task sent in it
    lines: dict[int, list[int]] = field(default_factory=dict)
    _shown: float = 0.0

    def show(self, out: IO[str], *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._shown < 0.5:
            return
        self._shown = now
        done = self.accepted + self.rejected
        rate = done / max(now - self.started, 1e-3)
        eta = ""
        if self.total_bytes and self.read_bytes and not final:
            left = (now - self.started) * (self.total_bytes / self.read_bytes - 1)
            eta = f", {100 * self.read_bytes / self.total_bytes:.0f} % read, ETA {left:.0f} s"
        print(f"\rimported {done:,} ({self.rejected:,} rejected) at {rate:,.0f}/s{eta}   ",
              end="\n" if final else "", file=out, flush=True)  # fmt: skip


def _reject(rejects: IO[str], line: int, code: str, message: str, task_id: str = "") -> None:
    entry = {"line": line, "code": code, "message": message, "task_id": task_id}
    rejects.write(json.dumps(entry) + "\n")


def _batches(
    source: IO[str], args: argparse.Namespace, progress: Progress, rejects: IO[str]
) -> Iterator[tasks_pb2.ImportTasksRequest]:
    """Batches of the input's tasks; a line that does not parse is a reject, not sent."""
    batch: list[tasks_pb2.CreateTaskRequest] = []
    lines: list[int] = []
    for number, text in enumerate(source, start=1):
        progress.read_bytes += len(text.encode())
        if number <= args.skip or not text.strip():
            continue
        try:
            req = json_format.Parse(text, tasks_pb2.CreateTaskRequest())
        except json_format.ParseError as exc:
            _reject(rejects, number, "INVALID_ARGUMENT", f"not a CreateTaskRequest: {exc}")
            progress.rejected += 1
            continue
        req.namespace = req.namespace or args.namespace
        batch.append(req)
        lines.append(number)
        if len(batch) == args.batch_size:
            yield _sent(batch, lines, progress)
            batch, lines = [], []
    if batch:
        yield _sent(batch, lines, progress)


def _sent(
    batch: list[tasks_pb2.CreateTaskRequest], lines: list[int], progress: Progress
) -> tasks_pb2.ImportTasksRequest:
    progress.lines[lines[0]] = lines
    return tasks_pb2.ImportTasksRequest(batch_id=lines[0], tasks=batch)


def _take(answer: tasks_pb2.ImportTasksResponse, progress: Progress, rejects: IO[str]) -> None:
    """Count one batch's answer and write its rejects."""
    lines = progress.lines.pop(answer.batch_id)
    if answer.code != _OK:
        for line in lines:
            _reject(rejects, line, _CODE_NAMES.get(answer.code, str(answer.code)), answer.message)
        progress.rejected += len(lines)
    for r in answer.results:
        if r.code == _OK:
            progress.accepted += 1
            progress.created += r.created
        else:
            code = _CODE_NAMES.get(r.code, str(r.code))
            _reject(rejects, lines[r.index], code, r.message, r.task_id)
            progress.rejected += 1
    progress.acknowledged_line = lines[-1]


def _import(args: argparse.Namespace, ch: grpc.Channel) -> None:
    source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    size = None if args.file == "-" else os.path.getsize(args.file)
    progress = Progress(total_bytes=size)
    stub = tasks_pb2_grpc.TaskServiceStub(ch)
    with source, open(args.rejects, "a", encoding="utf-8") as rejects:
        try:
            for answer in stub.ImportTasks(_batches(source, args, progress, rejects)):
                _take(answer, progress, rejects)
                progress.show(sys.stderr)
        except grpc.RpcError:
            progress.show(sys.stderr, final=True)
            resume = max(progress.acknowledged_line, args.skip)
            print(f"tikk: stopped; every line up to {resume} is done: resume with --skip {resume}",
                  file=sys.stderr)  # fmt: skip
            raise
    progress.show(sys.stderr, final=True)
    where = f" (see {args.rejects})" if progress.rejected else ""
    print(f"imported: {progress.accepted:,} accepted ({progress.created:,} created), "
          f"{progress.rejected:,} rejected{where}")  # fmt: skip


def register(sub: Any) -> None:
    """``task import``."""
    p = sub.add_parser("import", help="import tasks from JSON lines (a file, or - for stdin)")
    client_options(p)
    p.add_argument("file", help="one CreateTaskRequest per line in protobuf's JSON mapping")
    p.add_argument("--batch-size", type=int, default=1_000, help="tasks per batch (max 5,000)")
    p.add_argument("--rejects", default="rejects.jsonl", help="where refused lines are written")
    p.add_argument(
        "--skip", type=int, default=0, metavar="N",
        help="resume: skip the first N lines (as printed when an import stopped)",
    )  # fmt: skip
    p.set_defaults(func=client(_import))
