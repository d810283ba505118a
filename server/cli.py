"""The ``tikk`` command line: run the processes, and talk to a server as a client.

Exit codes: 0 ok, 1 the server refused the request, 2 bad usage, 3 server unreachable,
4 the worker module could not be loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.json_format import MessageToDict

from tikk.errors import InvalidArgument, TikkError
from tikk.settings import Settings, embedded_urls
from tikk.telemetry import Providers, open_telemetry
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc, tasks_pb2, tasks_pb2_grpc

if TYPE_CHECKING:
    from worker_sdk import Worker

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_IMPORT = 0, 1, 2, 3, 4
DEFAULT_SERVER = os.environ.get("TIKK_SERVER", "127.0.0.1:7070")
_OUR_PACKAGES = {"tikk", "server", "dispatcher", "worker_sdk", "history"}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``250ms``, ``30s``, ``5m``, ``1h30m``, ``2d`` → milliseconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"bad duration {text!r} (e.g. 30s, 5m, 1h30m)")
    return int(sum(float(n) * _UNIT_MS[u] for n, u in parts))


def parse_time_ms(text: str) -> int:
    """An ISO-8601 instant; without an offset it is taken as UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad time {text!r} (ISO-8601 expected)") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


def load_worker(target: str) -> Any:
    """Import ``module:attribute``. The module is looked up after our own packages, so a
    user's file cannot shadow tikk's, and a name that collides is refused clearly."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ImportError(f"worker target must be MODULE:ATTRIBUTE, got {target!r}")
    if module_name.split(".")[0] in _OUR_PACKAGES:
        raise ImportError(f"worker module {module_name!r} collides with a tikk package name")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.append(cwd)
    obj = getattr(importlib.import_module(module_name), attr, None)
    from worker_sdk import Worker

    if not isinstance(obj, Worker):
        raise ImportError(f"{target} is not a worker_sdk.Worker")
    return obj


def _settings(args: argparse.Namespace) -> Settings:
    urls = embedded_urls(args.data_dir)
    return Settings(
        store_url=args.store or urls["store_url"],
        history_url=args.history or urls["history_url"],
        queue_url=args.queue or urls["queue_url"],
        ownership_url=getattr(args, "ownership", None) or "",
        ownership_session_timeout_ms=args.session_timeout,
        shard_count=args.shards,
        listen=getattr(args, "listen", "127.0.0.1:7070"),
        visibility_timeout_ms=getattr(args, "visibility_timeout", 60_000),
    )


def _run_dev(args: argparse.Namespace) -> int:
    return _serve(args, dispatcher=True)


def _run_server(args: argparse.Namespace) -> int:
    return _serve(args, dispatcher=False)


def _serve(args: argparse.Namespace, dispatcher: bool) -> int:
    from server.runtime import install_stop_signals, serve

    try:
        workers = [load_worker(t) for t in args.worker]
    except ImportError as exc:
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_IMPORT
    settings = _settings(args)

    telemetry = open_telemetry(args.otel, f"tikk-{args.command}")
    for worker in workers:
        _trace_worker(worker, telemetry.providers)

    def ready(port: int) -> None:
        host = settings.listen.rpartition(":")[0] or "127.0.0.1"
        print(f"tikk {args.command} listening on {host}:{port}", flush=True)
        print(f"  store {settings.store_url}\n  queue {settings.queue_url}", flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        await serve(
            settings, stop, dispatcher=dispatcher, workers=workers, on_ready=ready,
            telemetry=telemetry,
        )  # fmt: skip

    return _run_process(args.command, main, telemetry)


def _run_process(name: str, main: Callable[[], Any], telemetry: Any) -> int:
    """Run a long-lived process; a refusal at start-up (a store created with another shard
    count, say) is one clear line and exit code 1, not a traceback."""
    try:
        asyncio.run(main())
    except TikkError as exc:
        print(f"tikk {name}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        telemetry.shutdown()
    return EXIT_OK


def _trace_worker(worker: Worker, providers: Providers | None) -> None:
    """Give a worker without telemetry of its own the process's providers."""
    from worker_sdk.telemetry import NoTelemetry, RunTelemetry

    if providers is not None and type(worker.telemetry) is NoTelemetry:
        worker.telemetry = RunTelemetry(providers.tracer_provider, providers.meter_provider)


def _run_dispatcher(args: argparse.Namespace) -> int:
    from server.runtime import install_stop_signals, run_dispatcher

    telemetry = open_telemetry(args.otel, "tikk-dispatcher")

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        print("tikk dispatcher running", flush=True)
        await run_dispatcher(_settings(args), stop, telemetry=telemetry)

    return _run_process("dispatcher", main, telemetry)


def _run_worker(args: argparse.Namespace) -> int:
    from server.runtime import install_stop_signals

    try:
        worker = load_worker(args.target)
    except ImportError as exc:
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_IMPORT

    def seconds(ms: int | None) -> float | None:
        return None if ms is None else ms / 1000  # a flag left out keeps the Worker's setting

    try:
        worker.set_failover(
            session_timeout_s=seconds(args.session_timeout),
            heartbeat_interval_s=seconds(args.heartbeat_interval),
            report_timeout_s=seconds(args.report_timeout),
        )
    except ValueError as exc:
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_USAGE

    telemetry = open_telemetry(args.otel, "tikk-worker")
    _trace_worker(worker, telemetry.providers)

    async def main() -> int:
        stop = asyncio.Event()
        install_stop_signals(stop)
        done: int = await worker.run(args.server, burst=args.burst, stop=stop)
        return done

    try:
        done = asyncio.run(main())
    finally:
        telemetry.shutdown()
    print(f"tikk worker finished {done} runs", flush=True)
    return EXIT_OK


def _run_migrate(args: argparse.Namespace) -> int:
    from server.wiring import migrate
    from tikk.clock import SystemClock

    try:
        applied = migrate(_settings(args), args.replication, SystemClock().now_ms())
    except TikkError as exc:
        print(f"tikk migrate: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    for step in applied:
        print(f"applied {step}")
    print("schema is up to date" if not applied else f"{len(applied)} step(s) applied")
    return EXIT_OK


def _run_bench(args: argparse.Namespace) -> int:
    from devtools.bench import BenchConfig, print_results, run_one

    results = []
    for backend in args.backends.split(","):
        cfg = BenchConfig(
            backend, args.tasks, args.rate, args.stored, args.workers, args.dispatchers, args.shards
        )
        print(
            f"bench: {backend}: {cfg.tasks} tasks at {cfg.rate:g}/s (+{cfg.stored} stored) ...",
            flush=True,
        )
        results.append(run_one(cfg))
        print_results(results[-1:])
    print_results(results)
    return EXIT_OK


def _run_bench_schedules(args: argparse.Namespace) -> int:
    from devtools.bench_schedules import print_result, run

    print_result(asyncio.run(run(_settings(args), args.schedules, args.lead)))
    return EXIT_OK


def _run_stack(args: argparse.Namespace) -> int:
    from devtools import stack

    try:
        if args.action == "up":
            stack.up(args.services or None, fresh=args.fresh)
            print("\nbackend URLs for tikk:")
            for name, url in stack.URLS.items():
                print(f"  --{name.removesuffix('_url').replace('_', '-')} {url}")
        elif args.action == "down":
            stack.down()
        else:
            return EXIT_OK if stack.status() else EXIT_REFUSED
    except stack.StackError as exc:
        print(f"tikk stack: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


# --- client commands ---------------------------------------------------------------------


def _ts(ts: Any) -> str:
    return datetime.fromtimestamp(ts.ToMilliseconds() / 1000, tz=UTC).isoformat(
        timespec="milliseconds"
    )


def _task_line(t: tasks_pb2.Task) -> str:
    state = tasks_pb2.TaskState.Name(t.state).removeprefix("TASK_STATE_").lower()
    line = f"{t.id}  {state:<13} {t.queue}/{t.handler}  attempt {t.attempt}  due {_ts(t.due_time)}"
    return line + (
        f"  error {t.last_error_type}: {t.last_error_message}" if t.last_error_type else ""
    )


def _run_line(r: history_pb2.Run) -> str:
    status = history_pb2.RunStatus.Name(r.status).removeprefix("RUN_STATUS_").lower()
    late = r.start_time.ToMilliseconds() - r.due_time.ToMilliseconds()
    line = (
        f"{r.run_id}  {r.task_id}  attempt {r.attempt}  {status:<13} "
        f"started {_ts(r.start_time)}  late {late} ms"
    )
    return line + (f"  {r.error_type}: {r.error_message}" if r.error_type else "")


def _show(args: argparse.Namespace, msg: Any, text: Callable[[], str]) -> None:
    if args.json:
        print(json.dumps(MessageToDict(msg, preserving_proto_field_name=True), indent=2))
    else:
        print(text())


def _schedules(ch: grpc.Channel) -> Any:
    from tikk.v1 import schedules_pb2_grpc

    return schedules_pb2_grpc.ScheduleServiceStub(ch)


def _spec(args: argparse.Namespace) -> Any:
    from tikk.v1 import schedules_pb2

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
    from tikk.v1 import schedules_pb2

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
        rows += [f"{o.local_time:<40} {_ts(o.fire_time)}" for o in resp.occurrences]
        return "\n".join(rows)

    _show(args, resp, table)


def _schedule_key(args: argparse.Namespace) -> Any:
    from tikk.v1 import schedules_pb2

    return schedules_pb2.GetScheduleRequest(namespace=args.namespace, schedule_id=args.id)


def _schedule_text(s: Any) -> str:
    spec = s.spec.cron or f"every {s.spec.interval.ToMilliseconds() / 1000:g}s"
    state = f"paused ({s.pause_note})" if s.paused else "active"
    nxt = _ts(s.next_fire_time) if s.HasField("next_fire_time") else "never (finished)"
    return (
        f"{s.id}  {spec} {s.spec.timezone}  {s.queue}/{s.handler}  {state}  runs {s.runs}"
        f"  next {nxt}  version {s.version}"
    )


def _schedule_create(args: argparse.Namespace, ch: grpc.Channel) -> None:
    from tikk.v1 import schedules_pb2

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
    _show(args, s, lambda: _schedule_text(s))


def _schedule_get(args: argparse.Namespace, ch: grpc.Channel) -> None:
    s = _schedules(ch).GetSchedule(_schedule_key(args), timeout=args.timeout)
    _show(args, s, lambda: _schedule_text(s))


def _schedule_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    from tikk.v1 import schedules_pb2

    req = schedules_pb2.ListSchedulesRequest(
        namespace=args.namespace, page_size=args.limit, page_token=args.page_token
    )
    resp = _schedules(ch).ListSchedules(req, timeout=args.timeout)
    lines = [_schedule_text(s) for s in resp.schedules]
    _show(args, resp, lambda: _lines(lines, resp.next_page_token))


def _schedule_pause(args: argparse.Namespace, ch: grpc.Channel) -> None:
    from tikk.v1 import schedules_pb2

    req = schedules_pb2.PauseScheduleRequest(
        namespace=args.namespace, schedule_id=args.id, note=args.note
    )
    s = _schedules(ch).PauseSchedule(req, timeout=args.timeout)
    _show(args, s, lambda: _schedule_text(s))


def _schedule_resume(args: argparse.Namespace, ch: grpc.Channel) -> None:
    from tikk.v1 import schedules_pb2

    req = schedules_pb2.ResumeScheduleRequest(namespace=args.namespace, schedule_id=args.id)
    s = _schedules(ch).ResumeSchedule(req, timeout=args.timeout)
    _show(args, s, lambda: _schedule_text(s))


def _schedule_trigger(args: argparse.Namespace, ch: grpc.Channel) -> None:
    from tikk.v1 import schedules_pb2

    req = schedules_pb2.TriggerScheduleRequest(namespace=args.namespace, schedule_id=args.id)
    resp = _schedules(ch).TriggerSchedule(req, timeout=args.timeout)
    _show(args, resp, lambda: _task_line(resp.task))


def _schedule_backfill(args: argparse.Namespace, ch: grpc.Channel) -> None:
    from tikk.v1 import schedules_pb2

    req = schedules_pb2.BackfillScheduleRequest(
        namespace=args.namespace,
        schedule_id=args.id,
        start_time=to_timestamp(args.start),
        end_time=to_timestamp(args.end),
    )
    resp = _schedules(ch).BackfillSchedule(req, timeout=args.timeout)
    _show(args, resp, lambda: f"created {resp.created}, already there {resp.existing}")


def _schedule_delete(args: argparse.Namespace, ch: grpc.Channel) -> None:
    from tikk.v1 import schedules_pb2

    req = schedules_pb2.DeleteScheduleRequest(
        namespace=args.namespace, schedule_id=args.id, expected_version=args.version or ""
    )
    resp = _schedules(ch).DeleteSchedule(req, timeout=args.timeout)
    _show(args, resp, lambda: f"deleted {args.id}")


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
        return f"{_ts(o.nominal_time)}  {outcome.lower():<15} {o.task_id}  {o.reason}".rstrip()

    _show(args, resp, lambda: _lines([line(o) for o in resp.occurrences], resp.next_page_token))


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
    _show(args, resp, lambda: ("created " if resp.created else "exists  ") + _task_line(resp.task))


def _task_get(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = tasks_pb2.GetTaskRequest(namespace=args.namespace, task_id=args.id)
    t = tasks_pb2_grpc.TaskServiceStub(ch).GetTask(req, timeout=args.timeout)
    _show(args, t, lambda: _task_line(t))


def _task_cancel(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = tasks_pb2.CancelTaskRequest(namespace=args.namespace, task_id=args.id)
    t = tasks_pb2_grpc.TaskServiceStub(ch).CancelTask(req, timeout=args.timeout)
    _show(args, t, lambda: _task_line(t))


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
    _show(args, resp, lambda: _lines([_task_line(t) for t in resp.tasks], resp.next_page_token))


def _lines(lines: list[str], token: str) -> str:
    return "\n".join(lines + ([f"(more: --page-token {token})"] if token else [])) or "(none)"


def _runs_task(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.ListTaskRunsRequest(
        namespace=args.namespace,
        task_id=args.id,
        page_size=args.limit,
        page_token=args.page_token,
    )
    resp = history_pb2_grpc.HistoryServiceStub(ch).ListTaskRuns(req, timeout=args.timeout)
    _show(args, resp, lambda: _lines([_run_line(r) for r in resp.runs], resp.next_page_token))


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
    _show(args, resp, lambda: _lines([_run_line(r) for r in resp.runs], resp.next_page_token))


def _runs_get(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.GetRunRequest(namespace=args.namespace, run_id=args.run_id)
    r = history_pb2_grpc.HistoryServiceStub(ch).GetRun(req, timeout=args.timeout)
    _show(args, r, lambda: _run_line(r))


def _dead_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.ListDeadLettersRequest(
        namespace=args.namespace,
        queue=args.queue or "",
        page_size=args.limit,
        page_token=args.page_token,
    )
    resp = history_pb2_grpc.HistoryServiceStub(ch).ListDeadLetters(req, timeout=args.timeout)
    _show(args, resp, lambda: _lines([_task_line(t) for t in resp.tasks], resp.next_page_token))


def _dead_redrive(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = history_pb2.RedriveTaskRequest(namespace=args.namespace, task_id=args.id)
    t = history_pb2_grpc.HistoryServiceStub(ch).RedriveTask(req, timeout=args.timeout)
    _show(args, t, lambda: _task_line(t))


def _queue_line(q: tasks_pb2.QueueInfo) -> str:
    age = f"{q.oldest_waiting_age.ToMilliseconds() / 1000:.1f}s" if q.waiting else "-"
    consumers = str(q.consumers) if q.HasField("consumers") else "?"
    return f"{q.name:<32} {q.waiting:>9} {age:>10} {consumers:>9}"


def _queues_list(args: argparse.Namespace, ch: grpc.Channel) -> None:
    req = tasks_pb2.ListQueuesRequest(page_size=args.limit, page_token=args.page_token)
    resp = tasks_pb2_grpc.TaskServiceStub(ch).ListQueues(req, timeout=args.timeout)
    header = f"{'queue':<32} {'waiting':>9} {'oldest':>10} {'consumers':>9}"
    lines = [header, *(_queue_line(q) for q in resp.queues)] if resp.queues else []
    _show(args, resp, lambda: _lines(lines, resp.next_page_token))


def _client(action: Callable[[argparse.Namespace, grpc.Channel], None]) -> Callable[..., int]:
    def run(args: argparse.Namespace) -> int:
        with grpc.insecure_channel(args.server) as channel:
            try:
                action(args, channel)
            except grpc.RpcError as exc:
                code = exc.code()
                print(f"tikk: {code.name}: {exc.details()}", file=sys.stderr)
                return EXIT_UNREACHABLE if code is grpc.StatusCode.UNAVAILABLE else EXIT_REFUSED
        return EXIT_OK

    return run


# --- argument parsing --------------------------------------------------------------------


def _backend_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default="data", help="where the embedded SQLite files live")
    p.add_argument("--store", help="task store URL (default: sqlite under --data-dir)")
    p.add_argument("--history", help="run history URL (default: sqlite under --data-dir)")
    p.add_argument("--queue", help="ready queue URL (default: local:// under --data-dir)")
    p.add_argument(
        "--ownership",
        help="shard ownership URL, e.g. zk://127.0.0.1:12181/tikk "
        "(default: this process owns every shard)",
    )
    p.add_argument(
        "--session-timeout",
        type=parse_duration_ms,
        default=10_000,
        help="ZooKeeper session timeout of a dispatcher (e.g. 10s)",
    )
    p.add_argument("--shards", type=int, default=256, help="shard count (fixed per store)")
    _otel_option(p)


def _otel_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otel",
        default=os.environ.get("TIKK_OTEL", "off"),
        metavar="EXPORTER",
        help="OpenTelemetry export: off, console, console:PATH, otlp, otlp:URL "
        "(default: $TIKK_OTEL or off)",
    )


def _client_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=DEFAULT_SERVER, help="address of a tikk server")
    p.add_argument("--namespace", default="", help="namespace (default: 'default')")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per call")


def _paging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--page-token", default="")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tikk", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    for name, fn, help_text in [
        ("dev", _run_dev, "all in one: API server + dispatcher (+ workers), embedded"),
        ("server", _run_server, "the API server"),
    ]:
        p = sub.add_parser(name, help=help_text)
        _backend_options(p)
        p.add_argument("--listen", default="127.0.0.1:7070", help="host:port (port 0 = any)")
        p.add_argument(
            "--visibility-timeout",
            type=parse_duration_ms,
            default=60_000,
            help="how long a worker may hold a task before redelivery (e.g. 60s)",
        )
        p.add_argument(
            "--worker",
            action="append",
            default=[],
            metavar="MODULE:ATTR",
            help="also run this worker in-process (repeatable)",
        )
        p.set_defaults(func=fn)

    p = sub.add_parser("dispatcher", help="a dispatcher: moves due tasks to the ready queue")
    _backend_options(p)
    p.set_defaults(func=_run_dispatcher)

    p = sub.add_parser("worker", help="run a worker_sdk.Worker")
    p.add_argument("target", metavar="MODULE:ATTR")
    p.add_argument("--server", default=DEFAULT_SERVER)
    p.add_argument("--burst", action="store_true", help="exit once the queues are empty")
    p.add_argument(
        "--session-timeout",
        type=parse_duration_ms,
        metavar="DURATION",
        help="Kafka consumer-group session: a killed worker's partitions move after about "
        "this long (default 6s, the brokers' minimum)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=parse_duration_ms,
        metavar="DURATION",
        help="Kafka consumer-group heartbeat, under a third of the session (default 1s)",
    )
    p.add_argument(
        "--report-timeout",
        type=parse_duration_ms,
        metavar="DURATION",
        help="results unacknowledged this long: stop consuming so others take over, "
        "resume when the server acknowledges again (default 15s)",
    )
    _otel_option(p)
    p.set_defaults(func=_run_worker)

    p = sub.add_parser("migrate", help="create or upgrade the Cassandra schema")
    _backend_options(p)
    p.add_argument(
        "--replication",
        default="{'class': 'SimpleStrategy', 'replication_factor': 1}",
        help="keyspace replication map (used when the keyspace is created)",
    )
    p.set_defaults(func=_run_migrate)

    p = sub.add_parser("bench", help="measure ingest rate and fire lateness")
    p.add_argument("--backends", default="embedded,stack", help="comma list: embedded, stack")
    p.add_argument("--tasks", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=2_000.0, help="fires per second")
    p.add_argument("--stored", type=int, default=0, help="extra tasks due tomorrow")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--dispatchers", type=int, default=2, help="stack only")
    p.add_argument("--shards", type=int, default=64)
    p.set_defaults(func=_run_bench)

    p = sub.add_parser(
        "bench-schedules", help="N schedules firing at one instant: step rate and lateness"
    )
    _backend_options(p)
    p.add_argument("--schedules", type=int, default=10_000)
    p.add_argument("--lead", type=float, default=20.0, help="seconds until they fire")
    p.set_defaults(func=_run_bench_schedules)

    p = sub.add_parser("stack", help="the local Cassandra + Kafka + ZooKeeper stack")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("services", nargs="*", help="cassandra, kafka, zookeeper (default: all)")
    p.add_argument("--fresh", action="store_true", help="wipe the services' data first")
    p.set_defaults(func=_run_stack)

    _task_commands(sub.add_parser("task", help="create, get, cancel, list tasks"))
    _run_commands(sub.add_parser("runs", help="run history"))
    _schedule_commands(sub.add_parser("schedule", help="recurring schedules"))
    _dead_commands(sub.add_parser("dead-letters", help="dead-lettered tasks"))
    _queue_commands(sub.add_parser("queues", help="ready queues and what waits in them"))
    return parser


def _task_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser("create")
    _client_options(p)
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
    p.set_defaults(func=_client(_task_create))
    for name, fn in [("get", _task_get), ("cancel", _task_cancel)]:
        p = sub.add_parser(name)
        _client_options(p)
        p.add_argument("id")
        p.set_defaults(func=_client(fn))
    p = sub.add_parser("list")
    _client_options(p)
    _paging(p)
    p.add_argument("--queue", required=True)
    p.add_argument(
        "--state", choices=["scheduled", "dispatched", "succeeded", "dead_lettered", "cancelled"]
    )
    p.set_defaults(func=_client(_task_list))


def _spec_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    what = p.add_mutually_exclusive_group(required=required)
    what.add_argument("--cron", help="cron expression (5 fields, or 6 with seconds first)")
    what.add_argument("--every", type=parse_duration_ms, help="fixed interval, e.g. 90s")
    p.add_argument("--tz", default="UTC", help="IANA time zone, e.g. Europe/Oslo")
    p.add_argument("--jitter", type=parse_duration_ms, help="deterministic jitter, e.g. 5s")


def _schedule_create_command(sub: Any) -> None:
    p = sub.add_parser("create", help="create a recurring schedule")
    _client_options(p)
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
    p.set_defaults(func=_client(_schedule_create))


def _schedule_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    _schedule_create_command(sub)
    for name, action, text in (
        ("get", _schedule_get, "show one schedule"),
        ("resume", _schedule_resume, "resume a paused schedule"),
        ("trigger", _schedule_trigger, "run one occurrence now"),
    ):
        p = sub.add_parser(name, help=text)
        _client_options(p)
        p.add_argument("id")
        p.set_defaults(func=_client(action))
    p = sub.add_parser("list", help="schedules of a namespace")
    _client_options(p)
    _paging(p)
    p.set_defaults(func=_client(_schedule_list))
    p = sub.add_parser("pause", help="pause a schedule (its occurrences are skipped)")
    _client_options(p)
    p.add_argument("id")
    p.add_argument("--note", default="", help="why (shown with the schedule)")
    p.set_defaults(func=_client(_schedule_pause))
    p = sub.add_parser("backfill", help="run the occurrences of a past range now")
    _client_options(p)
    p.add_argument("id")
    p.add_argument("--start", type=parse_time_ms, required=True, help="ISO-8601, inclusive")
    p.add_argument("--end", type=parse_time_ms, required=True, help="ISO-8601, exclusive")
    p.set_defaults(func=_client(_schedule_backfill))
    p = sub.add_parser("delete", help="delete a schedule (tasks already created stay)")
    _client_options(p)
    p.add_argument("id")
    p.add_argument("--version", help="delete only if still at this version")
    p.set_defaults(func=_client(_schedule_delete))
    p = sub.add_parser("occurrences", help="what became of each occurrence, newest first")
    _client_options(p)
    p.add_argument("id")
    _paging(p)
    p.set_defaults(func=_client(_schedule_occurrences))
    p = sub.add_parser("preview", help="the next fire times, local and UTC")
    _client_options(p)
    _spec_options(p, required=False)
    p.add_argument("--id", help="preview a stored schedule instead of a spec")
    p.add_argument("--after", type=parse_time_ms, help="ISO-8601 instant (default: now)")
    p.add_argument("--count", type=int, default=10)
    p.set_defaults(func=_client(_schedule_preview))


def _run_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser("task", help="runs of one task, newest first")
    _client_options(p)
    _paging(p)
    p.add_argument("id")
    p.set_defaults(func=_client(_runs_task))
    p = sub.add_parser("list", help="runs of a queue in a time window")
    _client_options(p)
    _paging(p)
    p.add_argument("--queue", required=True)
    p.add_argument("--status", choices=["succeeded", "failed", "dead_lettered"])
    p.add_argument("--since", type=parse_duration_ms, default=3_600_000, help="e.g. 1h")
    p.set_defaults(func=_client(_runs_list))
    p = sub.add_parser("get")
    _client_options(p)
    p.add_argument("run_id")
    p.set_defaults(func=_client(_runs_get))


def _dead_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser("list")
    _client_options(p)
    _paging(p)
    p.add_argument("--queue")
    p.set_defaults(func=_client(_dead_list))
    p = sub.add_parser("redrive")
    _client_options(p)
    p.add_argument("id")
    p.set_defaults(func=_client(_dead_redrive))


def _queue_commands(parent: argparse.ArgumentParser) -> None:
    sub = parent.add_subparsers(dest="action", required=True)
    p = sub.add_parser(
        "list", help="every queue the server knows of: tasks waiting, oldest age, consumers"
    )
    _client_options(p)
    _paging(p)
    p.set_defaults(func=_client(_queues_list))


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=os.environ.get("TIKK_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except InvalidArgument as exc:
        # A bad option value found while starting (a URL, an exporter): say which, no trace.
        print(f"tikk: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code


if __name__ == "__main__":
    raise SystemExit(main())
