"""``schedule update``: change a schedule's spec, zone, jitter, policies, action or payload,
showing its next fire times before and after the change first (``--dry-run`` stops there).

The schedule is read, changed, previewed both ways and written back only if nobody changed it
in between (its version is the update's condition): what was shown is what was written.
"""

from __future__ import annotations

import argparse
from itertools import zip_longest
from typing import Any, get_args

from server.cli.client import client, show, ts
from server.cli.options import client_options, parse_duration_ms
from tikk.client import Client
from tikk.client.specs import CatchUp, Overlap
from tikk.client.wire import enum_name
from tikk.text_rules import shown
from tikk.timestamps import to_duration
from tikk.v1 import schedules_pb2

# The policies' short names, as the client spells them (``tikk.client.specs``).
CATCH_UP_CHOICES, OVERLAP_CHOICES = get_args(CatchUp), get_args(Overlap)


def changed(s: schedules_pb2.Schedule, args: argparse.Namespace) -> schedules_pb2.Schedule:
    """``s`` with the changes the options ask for (an option not given keeps its value)."""
    new = schedules_pb2.Schedule()
    new.CopyFrom(s)
    if args.cron is not None:
        new.spec.cron = args.cron
        new.spec.ClearField("interval")
        new.spec.ClearField("phase")
    if args.every is not None:
        new.spec.cron = ""
        new.spec.interval.CopyFrom(to_duration(args.every))
    for name, value in (("timezone", args.tz), ("queue", args.queue), ("handler", args.handler)):
        if value is not None:
            setattr(new.spec if name == "timezone" else new, name, value)
    if args.jitter is not None:
        new.spec.jitter.CopyFrom(to_duration(args.jitter))
    if args.payload is not None:
        new.payload = args.payload.encode()
    _changed_policy(new.policy, args)
    return new


def _changed_policy(p: schedules_pb2.SchedulePolicy, args: argparse.Namespace) -> None:
    if args.catch_up is not None:
        catch_up = enum_name(schedules_pb2.CatchUpPolicy, "CATCH_UP_POLICY_", args.catch_up)
        p.catch_up = schedules_pb2.CatchUpPolicy.Value(catch_up)  # type: ignore[assignment]
    if args.catch_up_window is not None:
        p.catch_up_window.CopyFrom(to_duration(args.catch_up_window))
    if args.overlap is not None:
        overlap = enum_name(schedules_pb2.OverlapPolicy, "OVERLAP_POLICY_", args.overlap)
        p.overlap = schedules_pb2.OverlapPolicy.Value(overlap)  # type: ignore[assignment]
    if args.pause_after_failures is not None:
        p.pause_after_failures = args.pause_after_failures


def _spec_text(spec: schedules_pb2.ScheduleSpec) -> str:
    seconds = spec.interval.ToMilliseconds() / 1000
    what = f"cron {spec.cron!r}" if spec.cron else f"every {seconds:g}s"
    spread = spec.jitter.ToMilliseconds() / 1000
    jitter = f" jitter {spread:g}s" if spread else ""
    return f"{what} {spec.timezone or 'UTC'}{jitter}"


def _comparison(
    old: schedules_pb2.Schedule, new: schedules_pb2.Schedule, before: list[Any], after: list[Any]
) -> str:
    """The spec before and after, then the next fire times side by side (local and UTC)."""
    left = [f"{a.local_time} ({ts(a.fire_time)})" for a in before] or ["-"]
    right = [f"{b.local_time} ({ts(b.fire_time)})" for b in after] or ["-"]
    width = max(len(x) for x in [*left, "next fires before"]) + 3
    rows = [f"schedule {old.id}: {_spec_text(old.spec)}  ->  {_spec_text(new.spec)}",
            f"{'next fires before':<{width}}after"]  # fmt: skip
    rows += [f"{a:<{width}}{b}" for a, b in zip_longest(left, right, fillvalue="-")]
    return "\n".join(shown(r) for r in rows)


def _schedule_update(args: argparse.Namespace, tikk: Client) -> None:
    old = tikk.get_schedule(args.id)
    new = changed(old, args)
    before = tikk.preview_schedule(args.id, count=args.count)
    after = tikk.preview_schedule(new.spec, count=args.count)
    table = _comparison(old, new, before, after)
    if args.dry_run:
        answer = schedules_pb2.PreviewScheduleResponse(occurrences=after)
        show(args, answer, lambda: f"{table}\ndry run: nothing changed")
        return
    written = tikk.update_schedule(new, expected_version=old.version)
    show(args, written, lambda: f"{table}\nupdated to version {written.version}")


def register_update(sub: Any) -> None:
    """``schedule update``."""
    p = sub.add_parser("update", help="change a schedule, showing its next fires before/after")
    client_options(p)
    p.add_argument("id")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--cron", help="cron expression (5 fields, or 6 with seconds first)")
    what.add_argument("--every", type=parse_duration_ms, help="fixed interval, e.g. 90s")
    p.add_argument("--tz", help="IANA time zone, e.g. Europe/Oslo")
    p.add_argument("--jitter", type=parse_duration_ms, help="deterministic jitter, e.g. 5s")
    p.add_argument("--queue")
    p.add_argument("--handler")
    p.add_argument("--payload", help="payload as text")
    p.add_argument("--catch-up", choices=CATCH_UP_CHOICES)
    p.add_argument("--catch-up-window", type=parse_duration_ms)
    p.add_argument("--overlap", choices=OVERLAP_CHOICES)
    p.add_argument("--pause-after-failures", type=int)
    p.add_argument("--count", type=int, default=5, help="fire times shown each way")
    p.add_argument("--dry-run", action="store_true", help="show the change; write nothing")
    p.set_defaults(func=client(_schedule_update))
