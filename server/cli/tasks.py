"""``task`` (create, get, cancel, list, import) and ``runs`` (a task's or a queue's run history)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from server.cli.bulk import (
    action_options,
    one_or_many,
    register_count,
    run_verb,
    selection_options,
)
from server.cli.client import client, instant, show, show_page, span, task_line, ts
from server.cli.imports import register as register_import
from server.cli.options import client_options, paging, parse_duration_ms, parse_time_ms
from tikk.client import Client, RetryOptions, TaskSpec
from tikk.errors import InvalidArgument
from tikk.text_rules import shown
from tikk.v1 import history_pb2, tasks_pb2


def _run_line(r: history_pb2.Run) -> str:
    """One line of a run; what it holds of stored text escaped (``shown``)."""
    status = history_pb2.RunStatus.Name(r.status).removeprefix("RUN_STATUS_").lower()
    late = r.start_time.ToMilliseconds() - r.due_time.ToMilliseconds()
    line = (
        f"{r.run_id}  {r.task_id}  attempt {r.attempt}  {status:<13} "
        f"started {ts(r.start_time)}  late {late} ms"
    )
    return shown(line + (f"  {r.error_type}: {r.error_message}" if r.error_type else ""))


def _run_with_trace(r: history_pb2.Run) -> str:
    """A run's line, then its traceback (if it has one) indented, a line of text per line of
    the traceback, each escaped."""
    return "\n".join([_run_line(r), *(f"    {shown(t)}" for t in r.traceback.splitlines())])


def _run_text(args: argparse.Namespace) -> Callable[[history_pb2.Run], str]:
    return _run_with_trace if args.traceback else _run_line


def _task_spec(args: argparse.Namespace) -> TaskSpec:
    payload = (
        Path(args.payload_file).read_bytes() if args.payload_file else (args.payload or "").encode()
    )
    retry = None if args.max_attempts is None else RetryOptions(max_attempts=args.max_attempts)
    return TaskSpec(
        args.queue, args.handler, payload, task_id=args.id or "", run_at=instant(args.at),
        delay=span(args.delay), labels=dict(kv.split("=", 1) for kv in args.label),
        retry=retry, start_timeout=span(args.start_timeout),
        execution_timeout=span(args.execution_timeout),
    )  # fmt: skip


def _task_create(args: argparse.Namespace, tikk: Client) -> None:
    made = tikk.create_task(_task_spec(args))
    answer = tasks_pb2.CreateTaskResponse(task=made.task, created=made.created)
    show(args, answer, lambda: ("created " if made.created else "exists  ") + task_line(made.task))


def _task_get(args: argparse.Namespace, tikk: Client) -> None:
    t = tikk.get_task(args.id)
    show(args, t, lambda: task_line(t))


def _task_cancel(args: argparse.Namespace, tikk: Client) -> None:
    """One task by id, or every scheduled task a filter selects (``server.cli.bulk``)."""
    if one_or_many(args):
        run_verb(args, tikk, tikk.bulk_cancel, "scheduled")
        return
    t = tikk.cancel_task(args.id, stop_running=not args.keep_running)
    show(args, t, lambda: task_line(t))


def _task_reschedule(args: argparse.Namespace, tikk: Client) -> None:
    payload = Path(args.payload_file).read_bytes() if args.payload_file else args.payload
    t = tikk.reschedule_task(
        args.id, run_at=instant(args.at), delay=span(args.delay), payload=payload
    )
    show(args, t, lambda: task_line(t))


def _task_list(args: argparse.Namespace, tikk: Client) -> None:
    if not args.queue and not args.label:
        raise InvalidArgument("queue", "give --queue, --label or both")
    listing = tikk.list_tasks(
        args.queue or "", state=args.state, labels=",".join(args.label), page_size=args.limit
    )
    show_page(args, listing.page(args.page_token), task_line)


def _runs_task(args: argparse.Namespace, tikk: Client) -> None:
    listing = tikk.list_task_runs(args.id, page_size=args.limit)
    show_page(args, listing.page(args.page_token), _run_text(args))


def _runs_list(args: argparse.Namespace, tikk: Client) -> None:
    now = int(datetime.now(tz=UTC).timestamp() * 1000)
    listing = tikk.list_runs(
        args.queue, start=instant(now - args.since), end=instant(now + 1), status=args.status,
        page_size=args.limit,
    )  # fmt: skip
    show_page(args, listing.page(args.page_token), _run_text(args))


def _runs_get(args: argparse.Namespace, tikk: Client) -> None:
    r = tikk.get_run(args.run_id)
    show(args, r, lambda: _run_with_trace(r))


def register(sub: Any) -> None:
    """``task`` and ``runs``."""
    _task_commands(sub.add_parser("task", help="create, get, cancel, list tasks"))
    _run_commands(sub.add_parser("runs", help="run history"))


def _task_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    _create_command(sub)
    p = sub.add_parser("get")
    client_options(p)
    p.add_argument("id")
    p.set_defaults(func=client(_task_get))
    p = sub.add_parser("cancel", help="a task by id, or every scheduled task a filter selects")
    client_options(p)
    p.add_argument("id", nargs="?", help="the task (or give filter options instead)")
    p.add_argument(
        "--keep-running", action="store_true",
        help="refuse to cancel a task already dispatched instead of stopping its run",
    )  # fmt: skip
    selection_options(p, dead=False)
    action_options(p)
    p.set_defaults(func=client(_task_cancel))
    register_count(sub)
    _reschedule_command(sub)
    p = sub.add_parser("list")
    client_options(p)
    paging(p)
    p.add_argument("--queue", help="required unless --label is given")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE|KEY!=VALUE",
                   help="tasks whose labels match (repeat for more terms)")  # fmt: skip
    p.add_argument(
        "--state", choices=["scheduled", "dispatched", "succeeded", "dead_lettered", "cancelled"]
    )
    p.set_defaults(func=client(_task_list))
    register_import(sub)


def _reschedule_command(sub: Any) -> None:
    p = sub.add_parser("reschedule", help="move a scheduled task to another time")
    client_options(p)
    p.add_argument("id")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", type=parse_time_ms, help="ISO-8601 instant (UTC if no offset)")
    when.add_argument("--in", dest="delay", type=parse_duration_ms, help="from now, e.g. 1d")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--payload", help="replace the payload with this text")
    what.add_argument("--payload-file", help="replace the payload with a file's bytes")
    p.set_defaults(func=client(_task_reschedule))


def _create_command(sub: Any) -> None:
    p = sub.add_parser("create")
    client_options(p)
    p.add_argument("--queue", required=True)
    p.add_argument("--handler", required=True)
    p.add_argument("--id", help="task id (default: assigned by the server)")
    p.add_argument("--payload", help="payload text")
    p.add_argument("--payload-file", help="read the payload bytes from a file")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--at", type=parse_time_ms, help="ISO-8601 instant (UTC if no offset)")
    when.add_argument("--in", dest="delay", type=parse_duration_ms, help="delay, e.g. 30s")
    p.add_argument("--max-attempts", type=int)
    p.add_argument(
        "--start-timeout", type=parse_duration_ms,
        help="dead-letter an attempt that no worker started this long after its due time",
    )  # fmt: skip
    p.add_argument(
        "--execution-timeout", type=parse_duration_ms,
        help="stop a run that takes longer (instead of its handler's own timeout)",
    )  # fmt: skip
    p.set_defaults(func=client(_task_create))


def _run_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser("task", help="runs of one task, newest first")
    client_options(p)
    paging(p)
    p.add_argument("id")
    _traceback_option(p)
    p.set_defaults(func=client(_runs_task))
    p = sub.add_parser("list", help="runs of a queue in a time window")
    client_options(p)
    paging(p)
    p.add_argument("--queue", required=True)
    p.add_argument("--status", choices=["succeeded", "failed", "dead_lettered"])
    p.add_argument("--since", type=parse_duration_ms, default=3_600_000, help="e.g. 1h")
    _traceback_option(p)
    p.set_defaults(func=client(_runs_list))
    p = sub.add_parser("get", help="one run, with its traceback if it failed")
    client_options(p)
    p.add_argument("run_id")
    p.set_defaults(func=client(_runs_get))


def _traceback_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traceback", action="store_true", help="print each failed run's traceback under it"
    )
