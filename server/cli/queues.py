"""``dead-letters`` (list, redrive) and ``queues`` (what waits in each ready queue)."""

from __future__ import annotations

import argparse
from typing import Any

import grpc

from server.cli.client import client, lines, show, task_line
from server.cli.options import client_options, paging
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc


def _dead_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.ListDeadLettersRequest(
        namespace=args.namespace,
        queue=args.queue or "",
        page_size=args.limit,
        page_token=args.page_token,
    )
    resp = history_pb2_grpc.HistoryServiceStub(ch).ListDeadLetters(req, timeout=args.timeout)
    show(args, resp, lambda: lines([task_line(t) for t in resp.tasks], resp.next_page_token))


def _dead_redrive(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.RedriveTaskRequest(namespace=args.namespace, task_id=args.id)
    t = history_pb2_grpc.HistoryServiceStub(ch).RedriveTask(req, timeout=args.timeout)
    show(args, t, lambda: task_line(t))


def _queue_line(q: tasks_pb2.QueueInfo) -> str:
    age = f"{q.oldest_waiting_age.ToMilliseconds() / 1000:.1f}s" if q.waiting else "-"
    consumers = str(q.consumers) if q.HasField("consumers") else "?"
    return f"{q.name:<32} {q.waiting:>9} {age:>10} {consumers:>9}"


def _queues_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = tasks_pb2.ListQueuesRequest(page_size=args.limit, page_token=args.page_token)
    resp = tasks_pb2_grpc.TaskServiceStub(ch).ListQueues(req, timeout=args.timeout)
    header = f"{'queue':<32} {'waiting':>9} {'oldest':>10} {'consumers':>9}"
    rows = [header, *(_queue_line(q) for q in resp.queues)] if resp.queues else []
    show(args, resp, lambda: lines(rows, resp.next_page_token))


def register(sub: Any) -> None:
    """``dead-letters`` and ``queues``."""
    _dead_commands(sub.add_parser("dead-letters", help="dead-lettered tasks"))
    _queue_commands(sub.add_parser("queues", help="ready queues and what waits in them"))


def _dead_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser("list")
    client_options(p)
    paging(p)
    p.add_argument("--queue")
    p.set_defaults(func=client(_dead_list))
    p = sub.add_parser("redrive")
    client_options(p)
    p.add_argument("id")
    p.set_defaults(func=client(_dead_redrive))


def _queue_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser(
        "list", help="every queue the server knows of: tasks waiting, oldest age, consumers"
    )
    client_options(p)
    paging(p)
    p.set_defaults(func=client(_queues_list))
