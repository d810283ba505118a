"""``python -m devtools bench``: the scale benchmark. For each backend set (embedded, stack)
one run:

1. **ceiling**: the bare driver writes the same rows tikk writes for these tasks
   (``devtools.ceiling``), on a machine with no tikk process running yet;
2. **load**: ``stored`` tasks due a day later go in through ``ImportTasks``; the ingest rate
   is sampled every second, and the store's bytes on disk are measured afterwards;
3. **fire**: ``tasks`` more are imported, due from a lead time on at ``rate`` per second (or
   all at one instant: a burst), and every run is collected from the worker: lateness due →
   queue and due → handler start, the dispatchers' store reads per second and CPU.

Each tikk process (server, dispatchers, workers) is sampled for CPU time and memory at every
phase boundary (``devtools.proc_stats``), and for memory twice a second in between: the peak
of a process tree is the largest of all those samples. The run is returned as a JSON-ready
mapping, which ``devtools.bench_report`` turns into tables, plots and the README section. A
measurement, not a test: nothing here asserts.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from devtools import stack
from devtools.bench_load import IngestResult, Spread, ingest
from devtools.bench_procs import Fleet, wait_listening
from devtools.bench_report import cdf_points, summarize
from devtools.ceiling import CeilingResult, cassandra_ceiling, sqlite_ceiling
from devtools.dispatch_reads import rate_between, totals
from devtools.proc_stats import ProcSample
from devtools.profiles import profiling, summarise
from devtools.store_disk import cassandra_bytes, sqlite_bytes
from server.certs import DevPki, make_dev_pki
from tikk.client.transport import Transport

_DAY_MS = 86_400_000
# Stored tasks are spread over the day after tomorrow at this rate, so they fill many
# (shard, minute) partitions as a real backlog would, and none comes due during the run.
_STORED_RATE = 1_000.0
PHASES = ("start", "loaded", "queued", "fire_start", "done")


@dataclass(frozen=True)
class BenchConfig:
    backend: str  # "embedded" or "stack"
    tasks: int  # fired during the run
    rate: float  # fires per second, spread evenly; 0: all due at one instant (a burst)
    stored: int = 0  # loaded first, due a day later: what the fire phase runs beside
    workers: int = 2
    dispatchers: int = 2  # stack only; embedded dispatches inside ``tikk dev``
    shards: int = 64
    ceiling_tasks: int = 200_000  # at most; never more than the run loads
    # Extra arguments for the server command (e.g. ("--processes", "4")): the process tree of
    # the server is sampled whole, so helper processes it forks are counted.
    server_args: tuple[str, ...] = ()
    keep_keyspace: bool = False
    cassandra_data: Path = field(
        default_factory=lambda: stack.stack_dir() / "cassandra" / "data" / "data"
    )
    # Serve TLS (a development PKI made for the run); the clients and workers trust its CA.
    tls: bool = field(default=False, kw_only=True)
    # Record every process with py-spy during the fire phase into this folder (one raw file
    # per process) and summarise where the time went (``devtools.profiles``).
    profile: Path | None = field(default=None, kw_only=True)

    @property
    def mode(self) -> str:
        return "burst" if self.rate <= 0 else "spread"


@dataclass(frozen=True)
class _Run:
    """What one run started: its processes, where its server listens, its scratch names."""

    fleet: Fleet
    address: str
    work: Path
    keyspace: str
    transport: Transport


def run_one(cfg: BenchConfig) -> dict[str, Any]:
    """All three phases for one backend set; the figures as a JSON-ready mapping."""
    with tempfile.TemporaryDirectory(prefix="tikk-bench-") as tmp:
        work = Path(tmp)
        ceiling = _ceiling(cfg, work)
        env = {**os.environ, "TIKK_BENCH_OUT": str(work / "runs.txt"), "PYTHONUNBUFFERED": "1",
               "TIKK_LOG_LEVEL": "INFO"}  # fmt: skip
        fleet = Fleet(work, env)
        keyspace = f"tikk_bench_{uuid.uuid4().hex[:8]}"
        try:
            pki = make_dev_pki(work / "pki") if cfg.tls else None
            transport = Transport(ca_file=str(pki.ca_cert)) if pki else Transport()
            run = _Run(fleet, _start(cfg, fleet, keyspace, pki), work, keyspace, transport)
            with fleet.watching():
                figures, window = _measure(cfg, run)
        finally:
            fleet.stop()
            if cfg.backend == "stack" and not cfg.keep_keyspace:
                drop_keyspace(keyspace)
        # Read once the dispatchers stopped: each logs its totals on the way out, so the
        # fire phase is covered whatever the logging interval.
        figures["fire"].update(_store_reads(fleet, *window))
    return {**_describe(cfg), "ceiling": {**asdict(ceiling), "per_s": ceiling.per_s},
            **figures, "ingest_ratio": _ratio(figures, ceiling)}  # fmt: skip


def _describe(cfg: BenchConfig) -> dict[str, Any]:
    return {
        "backend": cfg.backend, "mode": cfg.mode, "stored": cfg.stored, "fired": cfg.tasks,
        "rate": cfg.rate, "shards": cfg.shards, "workers": cfg.workers,
        "dispatchers": cfg.dispatchers if cfg.backend == "stack" else 1,
        "server_args": list(cfg.server_args), "tls": cfg.tls,
    }  # fmt: skip


def _ratio(figures: dict[str, Any], ceiling: CeilingResult) -> float | None:
    """tikk's ingest over the driver's: the load phase's, or the fire phase's import."""
    tikk = (figures["load"] or figures["fire_ingest"])["per_s"]
    return tikk / ceiling.per_s if ceiling.per_s else None


def _ceiling(cfg: BenchConfig, work: Path) -> CeilingResult:
    n = min(cfg.ceiling_tasks, max(cfg.stored, cfg.tasks))
    spread = Spread(int(time.time() * 1000) + 2 * _DAY_MS, _STORED_RATE)
    if cfg.backend == "embedded":
        result = sqlite_ceiling(work / "ceiling.db", n, spread, "idle", cfg.shards)
        for leftover in work.glob("ceiling.db*"):
            leftover.unlink()
        return result
    return cassandra_ceiling(n, spread, "idle", cfg.shards, host="127.0.0.1", port=stack.CQL_PORT)


def _start(cfg: BenchConfig, fleet: Fleet, keyspace: str, pki: DevPki | None) -> str:
    """Start the run's processes (over TLS with ``pki``); the server's address."""
    shards = ["--shards", str(cfg.shards)]
    serve_tls = (
        ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)] if pki else []
    )
    listen = ["--listen", "127.0.0.1:0", *serve_tls, *cfg.server_args]
    trust = ["--tls-ca", str(pki.ca_cert)] if pki else []
    if cfg.backend == "embedded":
        data = ["--data-dir", str(fleet.work / "data")]
        server = fleet.spawn("server", "server+dispatcher", ["dev", *data, *shards, *listen])
    else:
        urls = [*stack_urls(keyspace), *shards]
        fleet.run(["migrate", *urls])
        # The server checks the delivery tokens the dispatchers sign: one keys file for all.
        keys = ["--delivery-keys", str(fleet.work / "delivery-keys")]
        server = fleet.spawn("server", "server", ["server", *urls, *keys, *listen])
        for i in range(cfg.dispatchers):
            fleet.spawn(f"dispatcher-{i + 1}", "dispatcher", ["dispatcher", *urls, *keys])
    address = wait_listening(server)
    if cfg.backend == "stack":  # their CPU per task too, sampled as the tikk processes are
        fleet.services += [(s.name, "service", pid) for s in stack.SERVICES if (pid := s.pid())]
    for i in range(cfg.workers):
        worker = ["worker", "devtools.bench_worker:worker", "--server", address, *trust]
        fleet.spawn(f"worker-{i + 1}", "worker", worker)
    return address


def stack_urls(keyspace: str) -> list[str]:
    tag = keyspace.rsplit("_", 1)[-1]
    cql = stack.login(f"cassandra://127.0.0.1:{stack.CQL_PORT}/{keyspace}")
    return [
        "--store", cql, "--history", cql,
        "--queue", stack.login(f"kafka://127.0.0.1:{stack.KAFKA_PORT}?prefix=bench{tag}.&partitions=8"),
        "--ownership", stack.login(f"zk://127.0.0.1:{stack.ZK_PORT}/tikk-bench-{tag}"),
    ]  # fmt: skip


def _measure(cfg: BenchConfig, run: _Run) -> tuple[dict[str, Any], tuple[int, int]]:
    """The figures of the load and fire phases, and the fire phase's window (epoch ms)."""
    samples: dict[str, dict[str, ProcSample | None]] = {"start": run.fleet.sample()}
    load = _load(cfg, run)
    samples["loaded"] = run.fleet.sample()
    disk = _disk(cfg, run) if cfg.stored else None
    fire_ingest, first_due = _queue_fire_tasks(cfg, run, load)
    samples["queued"] = run.fleet.sample()
    time.sleep(max(0.0, first_due / 1000 - time.time()))
    samples["fire_start"] = run.fleet.sample()
    fire_start_ms = int(time.time() * 1000)
    with profiling(run.fleet, cfg.profile) if cfg.profile else contextlib.nullcontext():
        runs = _collect(cfg, run, first_due)
    samples["done"] = run.fleet.sample()
    fire_end_ms = int(time.time() * 1000)
    processes = _process_figures(cfg, run.fleet, samples)
    seconds = (fire_end_ms - fire_start_ms) / 1000
    fire = {**_fire_figures(cfg, runs, seconds), **_dispatcher_cpu(processes, seconds)}
    return {
        "load": _ingest_figures(load, series=True) if load else None,
        "fire_ingest": _ingest_figures(fire_ingest, series=False),
        "fire": fire, "cdf": _cdfs(runs), "processes": processes, "disk": disk,
        "profile": summarise(cfg.profile) if cfg.profile else None,
    }, (fire_start_ms, fire_end_ms)  # fmt: skip


def _load(cfg: BenchConfig, run: _Run) -> IngestResult | None:
    if not cfg.stored:
        return None
    spread = Spread(int(time.time() * 1000) + _DAY_MS, _STORED_RATE)
    return ingest(run.address, cfg.stored, spread, "idle", run.transport)


def _queue_fire_tasks(
    cfg: BenchConfig, run: _Run, load: IngestResult | None
) -> tuple[IngestResult, int]:
    """Import the tasks to fire, due after a lead long enough to import them all first."""
    expected_rate = max(load.per_s if load else 1_000.0, 200.0)
    lead_ms = max(10_000, int(cfg.tasks / expected_rate * 1500) + 5_000)
    first_due = int(time.time() * 1000) + lead_ms
    result = ingest(run.address, cfg.tasks, Spread(first_due, cfg.rate), "bench", run.transport)
    run.fleet.check_alive()
    return result, first_due


def _collect(cfg: BenchConfig, run: _Run, first_due: int) -> dict[str, tuple[int, int, int]]:
    """Every run the worker recorded, by task id: (runs seen, due → start, due → queue) of
    its first run. Waits until every fired task ran once, or until a deadline generous for
    the backlog a slow machine builds."""
    last_due = Spread(first_due, cfg.rate).due_ms(max(0, cfg.tasks - 1))
    deadline = last_due / 1000 + 120 + cfg.tasks / 200
    log = RunLog(run.work / "runs.txt")
    while time.time() < deadline and len(log.runs) < cfg.tasks:
        time.sleep(0.5)
        log.read_new()
        run.fleet.check_alive()
    # The last results still reach the server after the handlers started: let them land so
    # the lifecycle's CPU includes recording them.
    time.sleep(2.0)
    log.read_new()
    return log.runs


class RunLog:
    """The worker's run records (``devtools.bench_worker``), read as they are appended."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self.runs: dict[str, tuple[int, int, int]] = {}

    def read_new(self) -> None:
        if not self._path.exists():
            return
        with open(self._path, "rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(complete)
        for line in complete.decode().splitlines():
            task_id, start, queue = line.split()
            seen = self.runs.get(task_id)
            self.runs[task_id] = (
                (seen[0] + 1, seen[1], seen[2]) if seen else (1, int(start), int(queue))
            )


def _fire_figures(
    cfg: BenchConfig, runs: dict[str, tuple[int, int, int]], seconds: float
) -> dict[str, Any]:
    handler = sorted(r[1] for r in runs.values())
    queue = sorted(r[2] for r in runs.values())
    # How long each waited between the queue and its start: the workers' side, apart.
    wait = sorted(r[1] - r[2] for r in runs.values())
    return {
        "seconds": round(seconds, 3), "distinct": len(runs),
        "duplicates": sum(r[0] - 1 for r in runs.values()),
        "missing": max(0, cfg.tasks - len(runs)),
        "queue_ms": summarize(queue), "handler_ms": summarize(handler),
        "queue_to_start_ms": summarize(wait),
        "last_handler_start_ms": handler[-1] if handler else None,
        "early": sum(1 for v in handler if v < 0),
    }  # fmt: skip


def _cdfs(runs: dict[str, tuple[int, int, int]]) -> dict[str, list[list[float]]]:
    return {
        "handler_ms": cdf_points(sorted(r[1] for r in runs.values())),
        "queue_ms": cdf_points(sorted(r[2] for r in runs.values())),
    }


def _ingest_figures(result: IngestResult, *, series: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tasks": result.tasks, "seconds": round(result.seconds, 3), "per_s": result.per_s,
    }  # fmt: skip
    if series:
        out["series"] = [[t, round(r, 1)] for t, r in result.series]
    return out


def _process_figures(
    cfg: BenchConfig, fleet: Fleet, samples: dict[str, dict[str, ProcSample | None]]
) -> list[dict[str, Any]]:
    out = []
    for name, role, pid in fleet.sampled():
        taken = {phase: samples[phase].get(name) for phase in PHASES}
        cpu = {p: round(s.cpu_s, 3) for p, s in taken.items() if s is not None}
        peak = fleet.peaks.bytes_of(name)
        out.append({
            "name": name, "role": role, "pid": pid, "cpu_s": cpu,
            "rss_mb": {p: _mb(s.rss_bytes) for p, s in taken.items() if s is not None},
            # The kernel's high-water mark (VmHWM) of the largest member: one process's, so
            # below the tree's resident set once the process forks. peak_mb is the tree's.
            "hwm_mb": max((_mb(s.hwm_bytes) for s in taken.values() if s), default=None),
            "peak_mb": None if peak is None else _mb(peak),
            "tree_size": max((s.processes for s in taken.values() if s), default=0),
            "cpu_s_per_1000": _cpu_per_1000(cfg, cpu),
        })  # fmt: skip
    return out


def _cpu_per_1000(cfg: BenchConfig, cpu: dict[str, float]) -> dict[str, float | None]:
    """CPU seconds per 1,000 tasks: loading the stored ones, and the whole life of the fired
    ones (import, wait, dispatch, run, result), and the fire phase alone."""

    def per(first: str, last: str, tasks: int) -> float | None:
        if tasks <= 0 or first not in cpu or last not in cpu:
            return None
        return round((cpu[last] - cpu[first]) * 1000 / tasks, 4)

    return {
        "load": per("start", "loaded", cfg.stored),
        "lifecycle": per("loaded", "done", cfg.tasks),
        "fire": per("fire_start", "done", cfg.tasks),
    }


def _mb(n: int) -> float:
    return round(n / 2**20, 1)


def _store_reads(fleet: Fleet, start_ms: int, end_ms: int) -> dict[str, float | None]:
    """Store reads per second over the fire phase, summed over the dispatching processes,
    from the running totals each logs (``devtools.dispatch_reads``)."""
    rates = [
        rate_between(totals(m.log.read_text(errors="replace")), start_ms, end_ms)
        for m in fleet.members
        if "dispatcher" in m.role
    ]
    known = [r for r in rates if r is not None]
    if not known:
        return {"store_reads_per_s": None, "rows_read_per_s": None}
    return {
        "store_reads_per_s": round(sum(r.reads_per_s for r in known), 1),
        "rows_read_per_s": round(sum(r.rows_per_s for r in known), 1),
    }


def _dispatcher_cpu(processes: list[dict[str, Any]], seconds: float) -> dict[str, float]:
    """CPU of the dispatching processes over the fire phase, in % of one core."""
    cpu = sum(
        p["cpu_s"]["done"] - p["cpu_s"]["fire_start"]
        for p in processes
        if "dispatcher" in p["role"] and {"done", "fire_start"} <= p["cpu_s"].keys()
    )
    return {"dispatcher_cpu_pct": round(cpu / max(seconds, 1e-3) * 100, 1)}


def _disk(cfg: BenchConfig, run: _Run) -> dict[str, Any]:
    if cfg.backend == "embedded":
        used = sqlite_bytes(run.work / "data" / "tikk.db")
    else:
        used = cassandra_bytes(run.keyspace, cfg.cassandra_data, "127.0.0.1", stack.CQL_PORT)
    per_task = used.bytes / cfg.stored if used.bytes is not None else None
    return {**asdict(used), "bytes_per_task": round(per_task, 1) if per_task else None}


def drop_keyspace(keyspace: str) -> None:
    from tikk.drivers.cassandra import CassandraConfig, CassandraSession

    db = CassandraSession(
        CassandraConfig.from_url(stack.login(f"cassandra://127.0.0.1:{stack.CQL_PORT}/{keyspace}"))
    )
    db.connect()
    try:
        db.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
    finally:
        db.shutdown()


def host() -> dict[str, Any]:
    """The machine the figures come from."""
    mem_kib = 0
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {"cpus": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1)}


def results_of(runs: list[dict[str, Any]], command: str, started_utc: str) -> dict[str, Any]:
    """The mapping ``results.json`` holds (``devtools.bench_report`` reads it)."""
    return {"schema": 1, "started_utc": started_utc, "command": command, "host": host(),
            "runs": runs}  # fmt: skip
