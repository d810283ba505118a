"""``task`` (create, get, cancel, list, import) and ``runs`` (a task's or a queue's run history)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from server.cli.client import client, lines, show, task_line, ts
from server.cli.imports import register as register_import
from server.cli.options import client_options, paging, parse_duration_ms, parse_time_ms
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc


def _run_line(r: history_pb2.Run) -> str:
    status = history_pb2.RunStatus.Name(r.status).removeprefix("RUN_STATUS_").lower()
    late = r.start_time.ToMilliseconds() - r.due_time.ToMilliseconds()
    line = (
        f"{r.run_id}  {r.task_id}  attempt {r.attempt}  {status:<13} "
        f"started {ts(r.start_time)}  late {late} ms"
    )
    return line + (f"  {r.error_type}: {r.error_message}" if r.error_type else "")


def _task_create(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = tasks_pb2.CreateTaskRequest(
        namespace=args.namespace,
        task_id=args.id or "",
        queue=args.queue,
        handler=args.handler,
        payload=(
            Path(args.payload_file).read_bytes()
            if args.payload_file
            else (args.payload or "").encode()
        ),
        labels=dict(kv.split("=", 1) for kv in args.label),
    )
    if args.at is not None:
        req.run_at.CopyFrom(to_timestamp(args.at))
    elif args.delay is not None:
        req.delay.CopyFrom(to_duration(args.delay))
    if args.max_attempts is not None:
        req.retry_policy.max_attempts = args.max_attempts
    if args.start_timeout is not None:
        req.start_timeout.CopyFrom(to_duration(args.start_timeout))
    resp = tasks_pb2_grpc.TaskServiceStub(ch).CreateTask(req, timeout=args.timeout)
    show(args, resp, lambda: ("created " if resp.created else "exists  ") + task_line(resp.task))


def _task_get(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = tasks_pb2.GetTaskRequest(namespace=args.namespace, task_id=args.id)
    t = tasks_pb2_grpc.TaskServiceStub(ch).GetTask(req, timeout=args.timeout)
    show(args, t, lambda: task_line(t))


def _task_cancel(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = tasks_pb2.CancelTaskRequest(namespace=args.namespace, task_id=args.id)
    t = tasks_pb2_grpc.TaskServiceStub(ch).CancelTask(req, timeout=args.timeout)
    show(args, t, lambda: task_line(t))


def _task_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    state = tasks_pb2.TaskState.Value("TASK_STATE_" + args.state.upper()) if args.state else 0
    req = tasks_pb2.ListTasksRequest(
        namespace=args.namespace,
        queue=args.queue,
        state=state,  # type: ignore[arg-type]
        page_size=args.limit,
        page_token=args.page_token,
    )
    resp = tasks_pb2_grpc.TaskServiceStub(ch).ListTasks(req, timeout=args.timeout)
    show(args, resp, lambda: lines([task_line(t) for t in resp.tasks], resp.next_page_token))


def _runs_task(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.ListTaskRunsRequest(
        namespace=args.namespace,
        task_id=args.id,
        page_size=args.limit,
        page_token=args.page_token,
    )
    resp = history_pb2_grpc.HistoryServiceStub(ch).ListTaskRuns(req, timeout=args.timeout)
    show(args, resp, lambda: lines([_run_line(r) for r in resp.runs], resp.next_page_token))


def _runs_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    status = history_pb2.RunStatus.Value("RUN_STATUS_" + args.status.upper()) if args.status else 0
    now = int(datetime.now(tz=UTC).timestamp() * 1000)
    req = history_pb2.ListRunsRequest(
        namespace=args.namespace,
        queue=args.queue,
        status=status,  # type: ignore[arg-type]
        start_time=to_timestamp(now - args.since),
        end_time=to_timestamp(now + 1),
        page_size=args.limit,
        page_token=args.page_token,
    )
    resp = history_pb2_grpc.HistoryServiceStub(ch).ListRuns(req, timeout=args.timeout)
    show(args, resp, lambda: lines([_run_line(r) for r in resp.runs], resp.next_page_token))


def _runs_get(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.GetRunRequest(namespace=args.namespace, run_id=args.run_id)
    r = history_pb2_grpc.HistoryServiceStub(ch).GetRun(req, timeout=args.timeout)
    show(args, r, lambda: _run_line(r))


def register(sub: Any) -> None:
    """``task`` and ``runs``."""
    _task_commands(sub.add_parser("task", help="create, get, cancel, list tasks"))
    _run_commands(sub.add_parser("runs", help="run history"))


def _task_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
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
    p.set_defaults(func=client(_task_create))
    for name, fn in [("get", _task_get), ("cancel", _task_cancel)]:
        p = sub.add_parser(name)
        client_options(p)
        p.add_argument("id")
        p.set_defaults(func=client(fn))
    p = sub.add_parser("list")
    client_options(p)
    paging(p)
    p.add_argument("--queue", required=True)
    p.add_argument(
        "--state", choices=["scheduled", "dispatched", "succeeded", "dead_lettered", "cancelled"]
    )
    p.set_defaults(func=client(_task_list))
    register_import(sub)


def _run_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser("task", help="runs of one task, newest first")
    client_options(p)
    paging(p)
    p.add_argument("id")
    p.set_defaults(func=client(_runs_task))
    p = sub.add_parser("list", help="runs of a queue in a time window")
    client_options(p)
    paging(p)
    p.add_argument("--queue", required=True)
    p.add_argument("--status", choices=["succeeded", "failed", "dead_lettered"])
    p.add_argument("--since", type=parse_duration_ms, default=3_600_000, help="e.g. 1h")
    p.set_defaults(func=client(_runs_list))
    p = sub.add_parser("get")
    client_options(p)
    p.add_argument("run_id")
    p.set_defaults(func=client(_runs_get))
