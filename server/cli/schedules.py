"""``schedule``: create, inspect, pause, trigger, backfill and preview recurring schedules."""

from __future__ import annotations

import argparse
from typing import Any

import grpc

from server.cli.client import client, lines, show, task_line, ts
from server.cli.options import client_options, paging, parse_duration_ms, parse_time_ms
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc, schedules_pb2, schedules_pb2_grpc


def _schedules(ch: grpc.Channel) -> Any:
    return schedules_pb2_grpc.ScheduleServiceStub(ch)


def _spec(args: argparse.Namespace) -> Any:
    spec = schedules_pb2.ScheduleSpec(cron=args.cron or "", timezone=args.tz)
    if args.every is not None:
        spec.interval.CopyFrom(to_duration(args.every))
    if getattr(args, "phase", None) is not None:
        spec.phase.CopyFrom(to_duration(args.phase))
    if args.jitter is not None:
        spec.jitter.CopyFrom(to_duration(args.jitter))
    for name in ("start", "end"):
        if getattr(args, name, None) is not None:
            getattr(spec, f"{name}_time").CopyFrom(to_timestamp(getattr(args, name)))
    if getattr(args, "max_runs", None):
        spec.max_runs = args.max_runs
    return spec


def _schedule_preview(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = schedules_pb2.PreviewScheduleRequest(count=args.count)
    if args.id:
        req.schedule.CopyFrom(_schedule_key(args))
    elif args.cron is None and args.every is None:
        raise SystemExit("tikk: give --cron, --every or --id")
    else:
        req.spec.CopyFrom(_spec(args))
    if args.after is not None:
        req.after_time.CopyFrom(to_timestamp(args.after))
    resp = _schedules(ch).PreviewSchedule(req, timeout=args.timeout)

    def table() -> str:
        rows = [f"{'local':<40} utc"]
        rows += [f"{o.local_time:<40} {ts(o.fire_time)}" for o in resp.occurrences]
        return "\n".join(rows)

    show(args, resp, table)


def _schedule_key(args: argparse.Namespace) -> Any:
    return schedules_pb2.GetScheduleRequest(namespace=args.namespace, schedule_id=args.id)


def _schedule_text(s: Any) -> str:
    spec = s.spec.cron or f"every {s.spec.interval.ToMilliseconds() / 1000:g}s"
    state = f"paused ({s.pause_note})" if s.paused else "active"
    nxt = ts(s.next_fire_time) if s.HasField("next_fire_time") else "never (finished)"
    return (
        f"{s.id}  {spec} {s.spec.timezone}  {s.queue}/{s.handler}  {state}  runs {s.runs}"
        f"  next {nxt}  version {s.version}"
    )


def _schedule_create(args: argparse.Namespace, ch: grpc.Channel) -> None:
    policy = schedules_pb2.SchedulePolicy(
        catch_up=f"CATCH_UP_POLICY_{args.catch_up.upper()}",
        overlap=f"OVERLAP_POLICY_{args.overlap.upper()}",
        pause_after_failures=args.pause_after_failures,
    )
    if args.catch_up_window is not None:
        policy.catch_up_window.CopyFrom(to_duration(args.catch_up_window))
    schedule = schedules_pb2.Schedule(
        namespace=args.namespace, id=args.id, spec=_spec(args), queue=args.queue,
        handler=args.handler, payload=(args.payload or "").encode(), policy=policy,
    )  # fmt: skip
    msg = schedules_pb2.CreateScheduleRequest(schedule=schedule)
    s = _schedules(ch).CreateSchedule(msg, timeout=args.timeout)
    show(args, s, lambda: _schedule_text(s))


def _schedule_get(args: argparse.Namespace, ch: grpc.Channel) -> None:
    s = _schedules(ch).GetSchedule(_schedule_key(args), timeout=args.timeout)
    show(args, s, lambda: _schedule_text(s))


def _schedule_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = schedules_pb2.ListSchedulesRequest(
        namespace=args.namespace, page_size=args.limit, page_token=args.page_token
    )
    resp = _schedules(ch).ListSchedules(req, timeout=args.timeout)
    rows = [_schedule_text(s) for s in resp.schedules]
    show(args, resp, lambda: lines(rows, resp.next_page_token))


def _schedule_pause(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = schedules_pb2.PauseScheduleRequest(
        namespace=args.namespace, schedule_id=args.id, note=args.note
    )
    s = _schedules(ch).PauseSchedule(req, timeout=args.timeout)
    show(args, s, lambda: _schedule_text(s))


def _schedule_resume(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = schedules_pb2.ResumeScheduleRequest(namespace=args.namespace, schedule_id=args.id)
    s = _schedules(ch).ResumeSchedule(req, timeout=args.timeout)
    show(args, s, lambda: _schedule_text(s))


def _schedule_trigger(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = schedules_pb2.TriggerScheduleRequest(namespace=args.namespace, schedule_id=args.id)
    resp = _schedules(ch).TriggerSchedule(req, timeout=args.timeout)
    show(args, resp, lambda: task_line(resp.task))


def _schedule_backfill(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = schedules_pb2.BackfillScheduleRequest(
        namespace=args.namespace,
        schedule_id=args.id,
        start_time=to_timestamp(args.start),
        end_time=to_timestamp(args.end),
    )
    resp = _schedules(ch).BackfillSchedule(req, timeout=args.timeout)
    show(args, resp, lambda: f"created {resp.created}, already there {resp.existing}")


def _schedule_delete(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = schedules_pb2.DeleteScheduleRequest(
        namespace=args.namespace, schedule_id=args.id, expected_version=args.version or ""
    )
    resp = _schedules(ch).DeleteSchedule(req, timeout=args.timeout)
    show(args, resp, lambda: f"deleted {args.id}")


def _schedule_occurrences(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.ListScheduleOccurrencesRequest(
        namespace=args.namespace, schedule_id=args.id, page_size=args.limit,
        page_token=args.page_token,
    )  # fmt: skip
    resp = history_pb2_grpc.HistoryServiceStub(ch).ListScheduleOccurrences(
        req, timeout=args.timeout
    )

    def line(o: Any) -> str:
        outcome = history_pb2.OccurrenceOutcome.Name(o.outcome).removeprefix("OCCURRENCE_OUTCOME_")
        return f"{ts(o.nominal_time)}  {outcome.lower():<15} {o.task_id}  {o.reason}".rstrip()

    show(args, resp, lambda: lines([line(o) for o in resp.occurrences], resp.next_page_token))


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
    p.add_argument("--catch-up", choices=["skip", "run_once", "run_all"], default="run_once")
    p.add_argument("--catch-up-window", type=parse_duration_ms, help="default 60s")
    p.add_argument(
        "--overlap", choices=["allow", "skip", "buffer_one", "cancel_previous"], default="allow"
    )
    p.add_argument("--pause-after-failures", type=int, default=0)
    p.set_defaults(func=client(_schedule_create))


def register(sub: Any) -> None:
    """``schedule`` and its actions."""
    parent = sub.add_parser("schedule", help="recurring schedules")
    actions = parent.add_subparsers(dest="action", required=True)
    _schedule_create_command(actions)
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
