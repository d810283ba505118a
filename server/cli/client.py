"""What the client commands share: the call to the server with its exit codes, and printing
the answer as text or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from server.cli.options import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, transport
from tikk.client.transport import TransportError
from tikk.v1 import tasks_pb2

Action = Callable[[argparse.Namespace, grpc.Channel], None]


def client(action: Action) -> Callable[..., int]:
    """A command that runs ``action`` on a channel to ``--server`` (over the transport of its
    options): a refusal is exit code 1, an unreachable server 3, a bad transport option 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            channel = transport(args).channel(args.server)
        except TransportError as exc:
            print(f"tikk: {exc}", file=sys.stderr)
            return EXIT_USAGE
        with channel:
            try:
                action(args, channel)
            except grpc.RpcError as exc:
                code = exc.code()
                print(f"tikk: {code.name}: {exc.details()}", file=sys.stderr)
                return EXIT_UNREACHABLE if code is grpc.StatusCode.UNAVAILABLE else EXIT_REFUSED
        return EXIT_OK

    return run


def show(args: argparse.Namespace, msg: Any, text: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(MessageToDict(msg, preserving_proto_field_name=True), indent=2))
    else:
        print(text())


def lines(rows: list[str], token: str) -> str:
    return "\n".join(rows + ([f"(more: --page-token {token})"] if token else [])) or "(none)"


def ts(value: Any) -> str:
    """A protobuf Timestamp as ISO-8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(value.ToMilliseconds() / 1000, tz=UTC).isoformat(
        timespec="milliseconds"
    )


def task_line(t: tasks_pb2.Task) -> str:
    state = tasks_pb2.TaskState.Name(t.state).removeprefix("TASK_STATE_").lower()
    line = f"{t.id}  {state:<13} {t.queue}/{t.handler}  attempt {t.attempt}  due {ts(t.due_time)}"
    return line + (
        f"  error {t.last_error_type}: {t.last_error_message}" if t.last_error_type else ""
    )
