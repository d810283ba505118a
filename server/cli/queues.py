"""``dead-letters`` (list; redrive and purge, one or by filter) and ``queues`` (what waits in
each ready queue; pause, resume, rate limits)."""

from __future__ import annotations

import argparse
from typing import Any

from server.cli.bulk import action_options, one_or_many, run_verb, selection_options
from server.cli.client import client, lines, show, show_page, span, task_line
from server.cli.options import client_options, paging, parse_duration_ms
from tikk.client import Client
from tikk.text_rules import shown
from tikk.v1 import tasks_pb2


def _dead_list(args: argparse.Namespace, tikk: Client) -> None:
    listing = tikk.list_dead_letters(queue=args.queue or "", page_size=args.limit)
    show_page(args, listing.page(args.page_token), task_line)


def _dead_redrive(args: argparse.Namespace, tikk: Client) -> None:
    if one_or_many(args):
        run_verb(args, tikk, tikk.bulk_redrive, "dead_lettered")
        return
    t = tikk.redrive_task(args.id)
    show(args, t, lambda: task_line(t))


def _dead_purge(args: argparse.Namespace, tikk: Client) -> None:
    if one_or_many(args):
        run_verb(args, tikk, tikk.bulk_purge, "dead_lettered")
        return
    t = tikk.purge_dead_letter(args.id)
    show(args, t, lambda: "purged  " + task_line(t))


_HEADER = (
    f"{'queue':<32} {'waiting':>9} {'oldest':>10} {'consumers':>9}  {'state':<6} {'held':>8}"
    f" {'rate':>8} {'skip':>8}"
)


def _queue_line(q: tasks_pb2.QueueInfo) -> str:
    """What waits, then what an operator set: paused or active, tasks held back by the
    dispatchers, the rate limit, and the age past which held tasks are skipped."""
    age = f"{q.oldest_waiting_age.ToMilliseconds() / 1000:.1f}s" if q.waiting else "-"
    consumers = str(q.consumers) if q.HasField("consumers") else "?"
    state = "paused" if q.paused else "active"
    held = f"{q.held:,}{'+' if q.held_more else ''}"
    rate = f"{q.max_per_second:g}/s" if q.max_per_second else "-"
    skip = _span(q.skip_older_than.ToMilliseconds()) if q.HasField("skip_older_than") else "-"
    return shown(
        f"{q.name:<32} {q.waiting:>9} {age:>10} {consumers:>9}  {state:<6} {held:>8} {rate:>8}"
        f" {skip:>8}"
    )


def _span(ms: int) -> str:
    """``90m`` → ``1h30m``: the largest units that say it exactly, as a span is given."""
    parts, rest = [], ms
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) + (f"{rest}ms" if rest or not parts else "")


def _queues_list(args: argparse.Namespace, tikk: Client) -> None:
    page = tikk.list_queues(page_size=args.limit).page(args.page_token)
    rows = [_HEADER, *(_queue_line(q) for q in page.items)] if page.items else []
    show(args, page.response, lambda: lines(rows, page.next_page_token))


def _queues_update(args: argparse.Namespace, tikk: Client) -> None:
    q = tikk.update_queue(
        args.name, paused={"pause": True, "resume": False}.get(args.action),
        max_per_second=args.rate, skip_older_than=span(args.skip_older_than),
    )  # fmt: skip
    show(args, q, lambda: lines([_HEADER, _queue_line(q)], ""))


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
    for name, fn, about in [
        (
            "redrive",
            _dead_redrive,
            "run a dead letter again from attempt 1, or all a filter selects",
        ),
        ("purge", _dead_purge, "delete a dead letter for good, or all a filter selects"),
    ]:
        p = sub.add_parser(name, help=about)
        client_options(p)
        p.add_argument("id", nargs="?", help="the task (or give filter options instead)")
        selection_options(p, dead=True)
        action_options(p)
        p.set_defaults(func=client(fn))


def _queue_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser(
        "list", help="every queue the server knows of: tasks waiting, oldest age, consumers"
    )
    client_options(p)
    paging(p)
    p.set_defaults(func=client(_queues_list))
    for name, about in [
        ("pause", "hold the queue's due tasks (they stay scheduled) until it is resumed"),
        ("resume", "release the held tasks in due order at a bounded rate, then run as before"),
        ("limit", "set the queue's dispatch rate or skip limit without pausing it"),
    ]:
        p = sub.add_parser(name, help=about)
        client_options(p)
        p.add_argument("name", help="the queue")
        p.add_argument(
            "--rate",
            type=float,
            metavar="PER_SECOND",
            default=None,
            help="most tasks dispatched per second over the queue; 0: no limit",
        )
        p.add_argument("--skip-older-than", type=parse_duration_ms, metavar="SPAN",
                       default=None, help="skip (cancel) held tasks due longer ago than this "
                       "when they are released; 0s: run every one")  # fmt: skip
        p.set_defaults(func=client(_queues_update))
