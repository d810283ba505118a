"""Acting on many tasks from the CLI: ``task cancel``, ``dead-letters redrive`` and
``dead-letters purge`` by filter (``--queue``, ``--label``, ``--error-type``, time bounds),
each with ``--dry-run`` (how many and a sample, nothing done) and ``--wait`` (follow the
server-side action to its end); ``task count``; and ``bulk`` (list, get, stop, wait) for
actions already started.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from server.cli.client import client, instant, show, show_page, task_line
from server.cli.options import client_options, paging, parse_duration_ms, parse_time_ms
from tikk.client import Client, TaskSelection
from tikk.errors import InvalidArgument
from tikk.text_rules import shown
from tikk.v1 import bulk_pb2

# How often ``--wait`` asks for an action's progress, and writes it when not on a terminal.
_POLL_S, _LOGGED_EVERY_S = 0.5, 10.0
BulkCall = Callable[..., bulk_pb2.BulkAction]


def selection_options(p: argparse.ArgumentParser, *, dead: bool) -> None:
    """The filter options; ``dead``: of dead letters (error type, failure time)."""
    p.add_argument("--queue", default="")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE|KEY!=VALUE",
                   help="repeat for more terms; at least one KEY=VALUE")  # fmt: skip
    p.add_argument("--due-after", type=parse_time_ms, metavar="TIME")
    p.add_argument("--due-before", type=parse_time_ms, metavar="TIME")
    if dead:
        p.add_argument("--error-type", default="", help="the last error's type, e.g. TimeoutError")
        p.add_argument(
            "--since", type=parse_duration_ms, metavar="SPAN",
            help="failed within this span, e.g. 2h (or --failed-after TIME)",
        )  # fmt: skip
        p.add_argument("--failed-after", type=parse_time_ms, metavar="TIME")
        p.add_argument("--failed-before", type=parse_time_ms, metavar="TIME")


def action_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true", help="count and show a sample; do nothing")
    p.add_argument("--wait", action="store_true", help="follow the action to its end")
    p.add_argument(
        "--action-id", default="", help="so that running this again starts nothing twice"
    )


def selection(args: argparse.Namespace, state: str | None = None) -> TaskSelection:
    since = getattr(args, "since", None)
    failed_after = getattr(args, "failed_after", None)
    if since is not None:
        failed_after = int(datetime.now(tz=UTC).timestamp() * 1000) - since
    return TaskSelection(
        queue=args.queue, labels=",".join(args.label), state=state,
        error_type=getattr(args, "error_type", ""),
        due_after=_at(args.due_after), due_before=_at(args.due_before),
        failed_after=_at(failed_after), failed_before=_at(getattr(args, "failed_before", None)),
    )  # fmt: skip


def _at(ms: int | None) -> datetime | None:
    return None if ms is None else instant(ms)


def one_or_many(args: argparse.Namespace) -> bool:
    """Whether a verb acts by filter (True) or on the one task ``args.id`` (False);
    ``InvalidArgument`` (a usage error) for both or neither."""
    names = ("queue", "label", "due_after", "due_before", "error_type", "since",
             "failed_after", "failed_before")  # fmt: skip
    by_filter = any(getattr(args, n, None) for n in names)
    if by_filter == bool(args.id):
        raise InvalidArgument("id", "give a task id, or filter options (--queue, --label, …)")
    if not by_filter and (args.dry_run or args.wait or args.action_id):
        raise InvalidArgument("dry-run", "--dry-run, --wait and --action-id go with a filter")
    return by_filter


def run_verb(args: argparse.Namespace, tikk: Client, call: BulkCall, state: str) -> None:
    """A bulk verb (``call``, a method of ``tikk``) by filter: its dry run, or its action
    (followed with ``--wait``)."""
    chosen = selection(args, state)
    if args.dry_run:
        preview = call(chosen, dry_run=True)
        show(args, preview, lambda: _preview_text(preview))
        return
    action = call(chosen, action_id=args.action_id)
    if args.wait and not args.json:
        action = follow(tikk, action)
    show(args, action, lambda: action_line(action) + _hint(action))


def _preview_text(p: bulk_pb2.BulkAction) -> str:
    verb = bulk_pb2.BulkVerb.Name(p.verb).removeprefix("BULK_VERB_").lower()
    count = f"{p.matched:,}" if p.complete else f"at least {p.matched:,}"
    head = f"dry run: {verb} would act on {count} tasks (read {p.read:,})"
    sample = [f"  {task_line(t)}" for t in p.sample]
    return "\n".join([head, *(["sample:", *sample] if sample else [])])


def action_line(a: bulk_pb2.BulkAction) -> str:
    verb = bulk_pb2.BulkVerb.Name(a.verb).removeprefix("BULK_VERB_").lower()
    state = bulk_pb2.BulkActionState.Name(a.state).removeprefix("BULK_ACTION_STATE_").lower()
    counts = (f"read {a.read:,}  matched {a.matched:,}  acted {a.acted:,}  "
              f"skipped {a.skipped:,}  failed {a.failed:,}")  # fmt: skip
    error = f"  last refusal: {a.error}" if a.error else ""
    return shown(f"{a.id}  {verb} {state}  {counts}{error}")


def _hint(a: bulk_pb2.BulkAction) -> str:
    running = a.state == bulk_pb2.BULK_ACTION_STATE_RUNNING
    return f"\nfollow it with: tikk bulk wait {a.id}" if running else ""


def follow(tikk: Client, action: bulk_pb2.BulkAction) -> bulk_pb2.BulkAction:
    """Poll ``action`` until it ended, writing its progress to stderr (rewritten in place
    on a terminal, a line every ``_LOGGED_EVERY_S`` elsewhere)."""
    live, shown_at = sys.stderr.isatty(), 0.0
    while action.state == bulk_pb2.BULK_ACTION_STATE_RUNNING:
        now = time.monotonic()
        if live or now - shown_at >= _LOGGED_EVERY_S:
            end = "" if live else "\n"
            print(
                ("\r" if live else "") + action_line(action), end=end, file=sys.stderr, flush=True
            )
            shown_at = now
        time.sleep(_POLL_S)
        action = tikk.get_bulk_action(action.id)
    if live:
        print(file=sys.stderr)
    return action


def _task_count(args: argparse.Namespace, tikk: Client) -> None:
    answer = tikk.count_tasks(selection(args, args.state))
    exact = "" if answer.complete else " (at least: stopped at its read limit)"
    show(args, answer, lambda: f"{answer.count:,} tasks{exact}")


def _bulk_list(args: argparse.Namespace, tikk: Client) -> None:
    show_page(args, tikk.list_bulk_actions(page_size=args.limit).page(args.page_token), action_line)


def _bulk_get(args: argparse.Namespace, tikk: Client) -> None:
    a = tikk.get_bulk_action(args.id)
    show(args, a, lambda: action_line(a))


def _bulk_stop(args: argparse.Namespace, tikk: Client) -> None:
    a = tikk.stop_bulk_action(args.id)
    show(args, a, lambda: action_line(a))


def _bulk_wait(args: argparse.Namespace, tikk: Client) -> None:
    a = follow(tikk, tikk.get_bulk_action(args.id))
    show(args, a, lambda: action_line(a))


def register_count(sub: Any) -> None:
    """``task count``."""
    p = sub.add_parser("count", help="how many tasks a filter selects")
    client_options(p)
    selection_options(p, dead=True)
    p.add_argument("--state", choices=["scheduled", "dispatched", "succeeded", "dead_lettered",
                                       "cancelled"])  # fmt: skip
    p.set_defaults(func=client(_task_count))


def register(sub: Any) -> None:
    """``bulk``: actions already started."""
    parent = sub.add_parser("bulk", help="bulk actions: list, get, stop, wait")
    actions = parent.add_subparsers(dest="action", required=True)
    p = actions.add_parser("list", help="the namespace's actions, last first")
    client_options(p)
    paging(p)
    p.set_defaults(func=client(_bulk_list))
    for name, fn, about in [("get", _bulk_get, "an action's progress"),
                            ("stop", _bulk_stop, "stop after the task it is at"),
                            ("wait", _bulk_wait, "follow an action to its end")]:  # fmt: skip
        p = actions.add_parser(name, help=about)
        client_options(p)
        p.add_argument("id")
        p.set_defaults(func=client(fn))
