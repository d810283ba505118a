"""``schedule``: create, update (``schedule_update``), inspect, pause, trigger, backfill and
preview recurring schedules."""

from __future__ import annotations

import argparse
from typing import Any

from server.cli.client import client, instant, show, show_page, span, task_line, ts
from server.cli.options import client_options, paging, parse_duration_ms, parse_time_ms
from server.cli.schedule_update import CATCH_UP_CHOICES, OVERLAP_CHOICES, register_update
from tikk.client import Client, Recurrence, ScheduleDefinition
from tikk.text_rules import shown
from tikk.v1 import history_pb2, schedules_pb2


def _recurrence(args: argparse.Namespace) -> Recurrence:
    """The recurrence of ``_spec_options`` (and of create's --phase, --start, --end,
    --max-runs)."""
    try:
        return Recurrence(
            cron=args.cron or "", every=span(args.every), phase=span(getattr(args, "phase", None)),
            timezone=args.tz, start=instant(getattr(args, "start", None)),
            end=instant(getattr(args, "end", None)), max_runs=getattr(args, "max_runs", 0) or 0,
            jitter=span(args.jitter),
        )  # fmt: skip
    except ValueError as exc:  # an empty --cron: neither a cron nor an interval
        raise SystemExit(f"tikk: {exc}") from None


def _schedule_preview(args: argparse.Namespace, tikk: Client) -> None:
    if args.id:
        target: str | Recurrence = args.id
    elif args.cron is None and args.every is None:
        raise SystemExit("tikk: give --cron, --every or --id")
    else:
        target = _recurrence(args)
    ahead = tikk.preview_schedule(target, after=instant(args.after), count=args.count)

    def table() -> str:
        rows = [f"{'local':<40} utc"]
        rows += [shown(f"{o.local_time:<40} {ts(o.fire_time)}") for o in ahead]
        return "\n".join(rows)

    # --json shows the answer as sent: rebuilt whole from what the client returns of it.
    show(args, schedules_pb2.PreviewScheduleResponse(occurrences=ahead), table)


def _schedule_text(s: Any) -> str:
    """One line of a schedule; what it holds of stored text escaped (``shown``)."""
    spec = s.spec.cron or f"every {s.spec.interval.ToMilliseconds() / 1000:g}s"
    state = f"paused ({s.pause_note})" if s.paused else "active"
    nxt = ts(s.next_fire_time) if s.HasField("next_fire_time") else "never (finished)"
    return shown(
        f"{s.id}  {spec} {s.spec.timezone}  {s.queue}/{s.handler}  {state}  runs {s.runs}"
        f"  next {nxt}  version {s.version}"
    )


def _schedule_create(args: argparse.Namespace, tikk: Client) -> None:
    definition = ScheduleDefinition(
        args.id, _recurrence(args), args.queue, args.handler, (args.payload or "").encode(),
        catch_up=args.catch_up, catch_up_window=span(args.catch_up_window),
        overlap=args.overlap, pause_after_failures=args.pause_after_failures,
    )  # fmt: skip
    s = tikk.create_schedule(definition)
    show(args, s, lambda: _schedule_text(s))


def _schedule_get(args: argparse.Namespace, tikk: Client) -> None:
    s = tikk.get_schedule(args.id)
    show(args, s, lambda: _schedule_text(s))


def _schedule_list(args: argparse.Namespace, tikk: Client) -> None:
    page = tikk.list_schedules(page_size=args.limit).page(args.page_token)
    show_page(args, page, _schedule_text)


def _schedule_pause(args: argparse.Namespace, tikk: Client) -> None:
    s = tikk.pause_schedule(args.id, note=args.note)
    show(args, s, lambda: _schedule_text(s))


def _schedule_resume(args: argparse.Namespace, tikk: Client) -> None:
    s = tikk.resume_schedule(args.id)
    show(args, s, lambda: _schedule_text(s))


def _schedule_trigger(args: argparse.Namespace, tikk: Client) -> None:
    task = tikk.trigger_schedule(args.id)
    show(args, schedules_pb2.TriggerScheduleResponse(task=task), lambda: task_line(task))


def _schedule_backfill(args: argparse.Namespace, tikk: Client) -> None:
    start, end = instant(args.start), instant(args.end)
    done = tikk.backfill_schedule(args.id, start, end, dry_run=args.dry_run)
    answer = schedules_pb2.BackfillScheduleResponse(
        created=done.created, existing=done.existing, occurrences=done.occurrences
    )
    if not args.dry_run:
        show(args, answer, lambda: f"created {done.created}, already there {done.existing}")
        return
    rows = [shown(f"  {o.local_time}  ({ts(o.nominal_time)})") for o in done.occurrences]
    head = f"dry run: would create {done.created}, already there {done.existing}"
    show(args, answer, lambda: "\n".join([head, *rows]))


def _schedule_delete(args: argparse.Namespace, tikk: Client) -> None:
    tikk.delete_schedule(args.id, expected_version=args.version or "")
    show(args, schedules_pb2.DeleteScheduleResponse(), lambda: shown(f"deleted {args.id}"))


def _occurrence_line(o: history_pb2.ScheduleOccurrence) -> str:
    outcome = history_pb2.OccurrenceOutcome.Name(o.outcome).removeprefix("OCCURRENCE_OUTCOME_")
    return shown(f"{ts(o.nominal_time)}  {outcome.lower():<15} {o.task_id}  {o.reason}".rstrip())


def _schedule_occurrences(args: argparse.Namespace, tikk: Client) -> None:
    listing = tikk.list_schedule_occurrences(args.id, page_size=args.limit)
    show_page(args, listing.page(args.page_token), _occurrence_line)


def _spec_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    what = p.add_mutually_exclusive_group(required=required)
    what.add_argument("--cron", help="cron expression (5 fields, or 6 with seconds first)")
    what.add_argument("--every", type=parse_duration_ms, help="fixed interval, e.g. 90s")
    p.add_argument("--tz", default="UTC", help="IANA time zone, e.g. Europe/Oslo")
    p.add_argument("--jitter", type=parse_duration_ms, help="deterministic jitter, e.g. 5s")


def _schedule_create_command(sub: Any) -> None:
    p = sub.add_parser("create", help="create a recurring schedule")
    client_options(p)
    p.add_argument("id")
    _spec_options(p)
    p.add_argument("--phase", type=parse_duration_ms, help="offset of --every, e.g. 15s")
    p.add_argument("--start", type=parse_time_ms, help="no occurrence before (ISO-8601)")
    p.add_argument("--end", type=parse_time_ms, help="no occurrence after (ISO-8601)")
    p.add_argument("--max-runs", type=int, default=0)
    p.add_argument("--queue", required=True)
    p.add_argument("--handler", required=True)
    p.add_argument("--payload", help="payload as text")
    p.add_argument("--catch-up", choices=CATCH_UP_CHOICES, default="run_once")
    p.add_argument("--catch-up-window", type=parse_duration_ms, help="default 60s")
    p.add_argument("--overlap", choices=OVERLAP_CHOICES, default="allow")
    p.add_argument("--pause-after-failures", type=int, default=0)
    p.set_defaults(func=client(_schedule_create))


def register(sub: Any) -> None:
    """``schedule`` and its actions."""
    parent = sub.add_parser("schedule", help="recurring schedules")
    actions = parent.add_subparsers(dest="action", required=True)
    _schedule_create_command(actions)
    register_update(actions)
    _state_commands(actions)
    _backfill_delete_commands(actions)
    _occurrence_commands(actions)


def _state_commands(sub: Any) -> None:
    """``get``, ``resume``, ``trigger``, ``list`` and ``pause``."""
    for name, action, text in (
        ("get", _schedule_get, "show one schedule"),
        ("resume", _schedule_resume, "resume a paused schedule"),
        ("trigger", _schedule_trigger, "run one occurrence now"),
    ):
        p = sub.add_parser(name, help=text)
        client_options(p)
        p.add_argument("id")
        p.set_defaults(func=client(action))
    p = sub.add_parser("list", help="schedules of a namespace")
    client_options(p)
    paging(p)
    p.set_defaults(func=client(_schedule_list))
    p = sub.add_parser("pause", help="pause a schedule (its occurrences are skipped)")
    client_options(p)
    p.add_argument("id")
    p.add_argument("--note", default="", help="why (shown with the schedule)")
    p.set_defaults(func=client(_schedule_pause))


def _backfill_delete_commands(sub: Any) -> None:
    p = sub.add_parser("backfill", help="run the occurrences of a past range now")
    client_options(p)
    p.add_argument("id")
    p.add_argument("--start", type=parse_time_ms, required=True, help="ISO-8601, inclusive")
    p.add_argument("--end", type=parse_time_ms, required=True, help="ISO-8601, exclusive")
    p.add_argument(
        "--dry-run", action="store_true", help="list what it would create; create nothing"
    )
    p.set_defaults(func=client(_schedule_backfill))
    p = sub.add_parser("delete", help="delete a schedule (tasks already created stay)")
    client_options(p)
    p.add_argument("id")
    p.add_argument("--version", help="delete only if still at this version")
    p.set_defaults(func=client(_schedule_delete))


def _occurrence_commands(sub: Any) -> None:
    """``occurrences`` (past) and ``preview`` (to come)."""
    p = sub.add_parser("occurrences", help="what became of each occurrence, newest first")
    client_options(p)
    p.add_argument("id")
    paging(p)
    p.set_defaults(func=client(_schedule_occurrences))
    p = sub.add_parser("preview", help="the next fire times, local and UTC")
    client_options(p)
    _spec_options(p, required=False)
    p.add_argument("--id", help="preview a stored schedule instead of a spec")
    p.add_argument("--after", type=parse_time_ms, help="ISO-8601 instant (default: now)")
    p.add_argument("--count", type=int, default=10)
    p.set_defaults(func=client(_schedule_preview))
