"""What the client commands share: a ``tikk.client.Client`` of the command's options with
the exit codes of its errors, the options' values as the client's Python values, and printing
the answer as text or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, overload

import grpc
from google.protobuf.json_format import MessageToDict

from server.cli.options import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE, transport
from tikk.client import CallRetries, Client, ClientError, Page, ServerList, TransportError
from tikk.text_rules import shown
from tikk.v1 import tasks_pb2

T = TypeVar("T")
Action = Callable[[argparse.Namespace, Client], None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def client(action: Action) -> Callable[[argparse.Namespace], int]:
    """A command that runs ``action`` with a client of ``--server`` in ``--namespace`` (over
    the transport of its options, each call bounded by ``--timeout``): a refusal is exit code
    1, an unreachable server 3, a bad transport option or server list 2. Calls are repeated
    only to move past a dead server (``failover_retries``), so that a script learns of an
    unreachable server without waiting."""

    def run(args: argparse.Namespace) -> int:
        try:
            tikk = Client(
                args.server, namespace=args.namespace, timeout=args.timeout,
                transport=transport(args), retry=failover_retries(args.server),
            )  # fmt: skip
        except TransportError as exc:
            print(f"tikk: {exc}", file=sys.stderr)
            return EXIT_USAGE
        with tikk:
            try:
                action(args, tikk)
            except ClientError as exc:
                return refused(exc)
        return EXIT_OK

    return run


def failover_retries(server: str) -> CallRetries | None:
    """How a command repeats a call. To one server, never: a failure is reported at once. To
    several (a list, a ``dns:`` name: ``tikk.client.server_list``), a call that is safe to
    repeat (``tikk.client.retries``) and met UNAVAILABLE, the server it went to having died
    under it, is sent again at once, and round robin sends it to the next server: as many
    times as there are servers (three for a DNS name), with no wait, so a command given
    every server works while one is down, and fails as fast as before when all are.
    ``TransportError`` for a server list that cannot be dialled."""
    servers = ServerList.parse(server)
    if not servers.balanced:
        return None
    attempts = max(3, len(servers.addresses))
    return CallRetries(attempts=attempts, initial_backoff_s=0.0, max_backoff_s=0.0)


def refused(exc: ClientError) -> int:
    """Say what the server answered (``tikk: CODE: details``); the exit code of it."""
    print(f"tikk: {exc.code.name}: {shown(exc.details)}", file=sys.stderr)
    return EXIT_UNREACHABLE if exc.code is grpc.StatusCode.UNAVAILABLE else EXIT_REFUSED


@overload
def instant(ms: int) -> datetime: ...
@overload
def instant(ms: None) -> None: ...
def instant(ms: int | None) -> datetime | None:
    """Milliseconds since the epoch (``parse_time_ms``) as the client's aware datetime,
    exactly (no float on the way)."""
    return None if ms is None else _EPOCH + timedelta(milliseconds=ms)


@overload
def span(ms: int) -> timedelta: ...
@overload
def span(ms: None) -> None: ...
def span(ms: int | None) -> timedelta | None:
    """Milliseconds (``parse_duration_ms``) as the client's timedelta."""
    return None if ms is None else timedelta(milliseconds=ms)


def show(args: argparse.Namespace, msg: Any, text: Callable[[], str]) -> None:
    """``--json``: the whole answer message as the server sent it; else ``text()``, whose
    lines show stored text through ``shown``. JSON escapes every character outside printable
    ASCII (``ensure_ascii``), controls and bidi controls included, so it prints safely too."""
    if args.json:
        answer = MessageToDict(msg, preserving_proto_field_name=True)
        print(json.dumps(answer, indent=2, ensure_ascii=True))
    else:
        print(text())


def show_page(args: argparse.Namespace, page: Page[T], line: Callable[[T], str]) -> None:
    """One page of a listing: a line per item and where the next page starts."""
    show(args, page.response, lambda: lines([line(i) for i in page.items], page.next_page_token))


def lines(rows: list[str], token: str) -> str:
    return "\n".join(rows + ([f"(more: --page-token {token})"] if token else [])) or "(none)"


def ts(value: Any) -> str:
    """A protobuf Timestamp as ISO-8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(value.ToMilliseconds() / 1000, tz=UTC).isoformat(
        timespec="milliseconds"
    )


def task_line(t: tasks_pb2.Task) -> str:
    """One line of a task; what it holds of stored text escaped (``shown``)."""
    state = tasks_pb2.TaskState.Name(t.state).removeprefix("TASK_STATE_").lower()
    line = f"{t.id}  {state:<13} {t.queue}/{t.handler}  attempt {t.attempt}  due {ts(t.due_time)}"
    error = f"  error {t.last_error_type}: {t.last_error_message}" if t.last_error_type else ""
    return shown(line + error)
