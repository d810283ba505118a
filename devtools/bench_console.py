"""How long the console's pages take with many tasks stored: ``python -m devtools
bench-console``.

A run fills a fresh store with ``--stored`` tasks due the day after tomorrow, written by the
bare driver with the store's own schema and statements (``devtools.ceiling``; the API would
take an hour for ten million on the stack). It then starts real processes on that store (the
embedded ``tikk dev``, or a server and a dispatcher on the local stack) and a real worker,
and through the API gives them ``--succeeded`` tasks that run, ``--dead`` that fail for good
(so the dead-letter pages read full pages) and a schedule firing every minute. Once those
have run it asks each page ``--rounds`` times in turn, over loopback, and reports the
server's answer time per page: p50, p99 and max. A browser adds its own drawing time.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import os
import re
import sqlite3
import statistics
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from devtools import stack
from devtools.bench import drop_keyspace, stack_urls
from devtools.bench_load import Spread
from devtools.bench_procs import Fleet, TikkProcess
from devtools.ceiling import sqlite_ceiling, task_chunks, write_chunk
from tikk.client import AlreadyExistsError, Client, Recurrence, ScheduleDefinition, TaskSpec
from tikk.v1 import tasks_pb2

_DAY_MS = 86_400_000
_QUEUE = "bench"  # the queue devtools.bench_worker serves
_SCHEDULE = "console-bench-every-minute"
_COMING = 600  # tasks due over the coming hour, one each 6 s
_MISSING_ERROR = "NoSuchError"
_PROGRESS_EVERY = 1_000_000  # a dead-letter filter nothing matches: the longest read


@dataclass(frozen=True)
class ConsoleBenchConfig:
    backend: str  # "embedded" or "stack"
    stored: int
    succeeded: int = 2_000
    dead: int = 2_500
    rounds: int = 30
    shards: int = 64
    # Stack only: a keyspace an earlier run filled and kept (no fill; kept again), and
    # whether to keep the one this run fills (ten million take the bare driver 40 minutes).
    keyspace: str = ""
    keep: bool = False


@dataclass(frozen=True)
class PageTime:
    page: str
    path: str
    p50_ms: float
    p99_ms: float
    max_ms: float


def run(cfg: ConsoleBenchConfig) -> list[PageTime]:
    """Fill, start, seed, then time every page; everything started is stopped again."""
    with tempfile.TemporaryDirectory(prefix="tikk-console-bench-") as tmp:
        work = Path(tmp)
        fleet = Fleet(work, {**os.environ, "TIKK_BENCH_OUT": str(work / "runs.txt")})
        keyspace = cfg.keyspace or f"tikk_console_{uuid.uuid4().hex[:8]}"
        try:
            stored_id, address, console = _start(cfg, fleet, keyspace)
            with Client(address) as client:
                seeded = _seed(cfg, client, fleet)
            return _time_pages(console, _pages(stored_id, seeded), cfg.rounds)
        finally:
            fleet.stop()
            if cfg.backend == "stack" and not (cfg.keep or cfg.keyspace):
                drop_keyspace(keyspace)
            elif cfg.backend == "stack":
                print(f"keyspace {keyspace} kept: --keyspace {keyspace} times it again")


def _start(cfg: ConsoleBenchConfig, fleet: Fleet, keyspace: str) -> tuple[str, str, str]:
    """Fill the store and start the processes: a stored task's id, the gRPC address, the
    console's URL."""
    shards = ["--shards", str(cfg.shards)]
    listen = ["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"]
    if cfg.backend == "embedded":
        data = fleet.work / "data"
        data.mkdir()
        stored_id = _fill_sqlite(data / "tikk.db", cfg)
        server = fleet.spawn("server", "server+dispatcher",
                             ["dev", "--data-dir", str(data), *shards, *listen])  # fmt: skip
    else:
        urls = [*stack_urls(keyspace), *shards]
        fleet.run(["migrate", *urls])
        stored_id = _stored_task(keyspace) if cfg.keyspace else _fill_cassandra(keyspace, cfg)
        keys = ["--delivery-keys", str(fleet.work / "delivery-keys")]
        server = fleet.spawn("server", "server", ["server", *urls, *keys, *listen])
        fleet.spawn("dispatcher", "dispatcher", ["dispatcher", *urls, *keys])
    address, console = _listening(server)
    fleet.spawn("worker", "worker", ["worker", "devtools.bench_worker:worker", "--server", address])
    return stored_id, address, console


def _spread() -> Spread:
    return Spread(int(time.time() * 1000) + 2 * _DAY_MS, 1_000.0)


def _fill_sqlite(path: Path, cfg: ConsoleBenchConfig) -> str:
    sqlite_ceiling(path, cfg.stored, _spread(), "idle", cfg.shards)
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT task_id FROM tasks LIMIT 1").fetchone()
    finally:
        conn.close()
    return str(row[0]) if row else ""


def _fill_cassandra(keyspace: str, cfg: ConsoleBenchConfig) -> str:
    from tikk.drivers.cassandra import CassandraConfig, CassandraSession

    url = stack.login(f"cassandra://127.0.0.1:{stack.CQL_PORT}/{keyspace}")
    db = CassandraSession(CassandraConfig.from_url(url))
    db.connect()
    first = ""
    try:
        written, began = 0, time.monotonic()
        for chunk in task_chunks(cfg.stored, _spread(), "idle", cfg.shards):
            first = first or chunk[0].task_id
            write_chunk(db, chunk)
            written += len(chunk)
            if written % _PROGRESS_EVERY < len(chunk):  # a load of millions takes a while
                rate = written / (time.monotonic() - began)
                print(f"  {written:,} stored ({rate:,.0f}/s)", flush=True)
    finally:
        db.shutdown()
    return first


def _stored_task(keyspace: str) -> str:
    """A task an earlier run stored in ``keyspace`` (of the idle queue, not a seeded one)."""
    from tikk.drivers.cassandra import CassandraConfig, CassandraSession

    url = stack.login(f"cassandra://127.0.0.1:{stack.CQL_PORT}/{keyspace}")
    db = CassandraSession(CassandraConfig.from_url(url))
    db.connect()
    try:
        rows = db.session.execute(f"SELECT task_id, queue FROM {keyspace}.tasks LIMIT 1000")
        return next(str(r.task_id) for r in rows if r.queue == "idle")
    finally:
        db.shutdown()


def _listening(server: TikkProcess, timeout_s: float = 180) -> tuple[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = server.log.read_text(errors="replace")
        grpc_at = re.search(r"listening on ([\d.]+:\d+)", out)
        console = re.search(r"console (http://\S+)", out)
        if grpc_at and console:
            return grpc_at.group(1), console.group(1).removesuffix("console/")
        if server.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"the server did not start:\n{server.log.read_text()[-3000:]}")


@dataclass(frozen=True)
class _Seeded:
    ran_id: str  # a task with a run
    dead_id: str  # a dead-lettered task


def _seed(cfg: ConsoleBenchConfig, client: Client, fleet: Fleet) -> _Seeded:
    """Tasks that run, tasks that dead-letter, a schedule; returns once they have run."""
    with contextlib.suppress(AlreadyExistsError):  # a kept keyspace has it from before
        client.create_schedule(ScheduleDefinition(
            _SCHEDULE, Recurrence(every=timedelta(minutes=1)), queue=_QUEUE, handler="noop",
        ))  # fmt: skip
    specs = [TaskSpec(_QUEUE, "noop") for _ in range(cfg.succeeded)]
    specs += [TaskSpec(_QUEUE, "fail") for _ in range(cfg.dead)]
    ids = [r.task_id for r in client.import_tasks(specs)]
    # Due over the coming hour, for the upcoming view (not waited for).
    now = datetime.now(UTC)
    coming = [TaskSpec(_QUEUE, "noop", run_at=now + timedelta(minutes=2, seconds=i * 6))
              for i in range(_COMING)]  # fmt: skip
    list(client.import_tasks(coming))
    seeded = _Seeded(ids[0] if cfg.succeeded else "", ids[-1] if cfg.dead else "")
    pending = set(ids)
    deadline = time.monotonic() + 120 + len(ids) / 50
    while pending:
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} seeded task(s) did not finish in time")
        time.sleep(1.0)
        pending = {i for i in pending if client.get_task(i).state not in _FINISHED}
    return seeded


_FINISHED = {tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_DEAD_LETTERED,
             tasks_pb2.TASK_STATE_CANCELLED}  # fmt: skip


@dataclass(frozen=True)
class _Page:
    name: str
    path: str
    shows: str  # text the answer must hold, so a page that shows nothing is not timed


def _pages(stored_id: str, seeded: _Seeded) -> list[_Page]:
    ns = "/console/ns/default"
    failed = "fails on purpose"
    return [
        _Page("overview", "/console/", _QUEUE),
        _Page("overview data (live refresh)", "/console/api/overview", _QUEUE),
        _Page("task, one of those stored", f"{ns}/tasks/{quote(stored_id, safe='')}", "SCHEDULED"),
        _Page("task, with its run", f"{ns}/tasks/{quote(seeded.ran_id, safe='')}", "SUCCEEDED"),
        _Page("task, dead-lettered", f"{ns}/tasks/{quote(seeded.dead_id, safe='')}", failed),
        _Page("dead letters", f"{ns}/dead-letters", failed),
        _Page("dead letters, filter matching none",
              f"{ns}/dead-letters?error_type={_MISSING_ERROR}", "No dead letter matches."),
        _Page("count of every dead letter (before a bulk redrive)",
              f"{ns}/dead-letters/all?verb=redrive", "dead letter(s) match"),
        _Page("bulk actions", f"{ns}/bulk", "No bulk action"),
        _Page("run history of a queue", f"{ns}/runs?queue={_QUEUE}&hours=24", "DEAD_LETTERED"),
        _Page("run history, succeeded only",
              f"{ns}/runs?queue={_QUEUE}&status=succeeded&hours=24", "SUCCEEDED"),
        _Page("upcoming, 60 minutes", f"{ns}/upcoming", "due in the next 60 minute"),
        _Page("upcoming, 1,440 minutes", f"{ns}/upcoming?minutes=1440",
              "task(s) due in the next 1440"),
        _Page("schedules", f"{ns}/schedules", _SCHEDULE),
        _Page("a schedule", f"{ns}/schedules/{_SCHEDULE}", "every 60 s"),
        _Page("/metrics", "/metrics", "tikk_results_start_lateness_ms_bucket"),
    ]  # fmt: skip


def _time_pages(base: str, pages: list[_Page], rounds: int) -> list[PageTime]:
    """Each page ``rounds`` times, the pages in turn (so a page does not only see its own
    cached reads); each answer must be 200 and show what the page is for."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    spent: dict[str, list[float]] = {p.name: [] for p in pages}
    for _ in range(rounds):
        for p in pages:
            began = time.perf_counter()
            with opener.open(base.rstrip("/") + p.path, timeout=30) as answer:
                body = answer.read().decode("utf-8", errors="replace")
            spent[p.name].append((time.perf_counter() - began) * 1000)
            if p.shows not in body:
                raise RuntimeError(f"{p.path} does not show {p.shows!r}:\n{body[:2000]}")
    return [_summary(p.name, p.path, spent[p.name]) for p in pages]


def _summary(name: str, path: str, ms: list[float]) -> PageTime:
    ordered = sorted(ms)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return PageTime(name, path, statistics.median(ordered), p99, ordered[-1])


def table(cfg: ConsoleBenchConfig, times: list[PageTime], seconds: float) -> Iterator[str]:
    """The result as Markdown, with what was stored and how long the run took."""
    yield (
        f"Console pages on {cfg.backend} with {cfg.stored:,} tasks stored, {cfg.succeeded:,} "
        f"run, {cfg.dead:,} dead-lettered; {cfg.rounds} rounds (run took {seconds:.0f} s)"
    )
    yield ""
    yield "| page | p50 ms | p99 ms | max ms |"
    yield "| --- | --- | --- | --- |"
    for t in times:
        yield f"| {t.page} | {t.p50_ms:.1f} | {t.p99_ms:.1f} | {t.max_ms:.1f} |"


def describe(times: list[PageTime]) -> list[dict[str, Any]]:
    return [t.__dict__ for t in times]
