"""``tikk bench``: load N tasks through the streaming RPC, fire them at a given rate, and
report ingest rate and lateness (due → handed to the queue, due → handler start).

Runs real processes (server, dispatchers, workers) for each backend set and prints the
figures side by side. A measurement, not a test: nothing here asserts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from devtools import stack
from tikk.timestamps import to_timestamp
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
_CHUNK = 1000


@dataclass(frozen=True)
class BenchConfig:
    backend: str  # "embedded" or "stack"
    tasks: int
    rate: float  # fires per second, spread evenly
    stored: int = 0  # extra tasks due tomorrow, to show scans ignore what is not due
    workers: int = 2
    dispatchers: int = 2
    shards: int = 64


@dataclass(frozen=True)
class Result:
    backend: str
    tasks: int
    stored: int
    ingest_per_s: float
    fired: int
    handler_p50: int
    handler_p99: int
    handler_max: int
    queue_p50: int
    queue_p99: int
    queue_max: int


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "server.cli", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**env},
        )


def _wait_port(log: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if m := re.search(r"listening on ([\d.]+:\d+)", log.read_text(errors="replace")):
            return m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError(f"server did not start:\n{log.read_text(errors='replace')[-3000:]}")


def _requests(
    n: int, first_due: int, rate: float, queue: str
) -> Iterator[tasks_pb2.ImportTasksRequest]:
    for start in range(0, n, _CHUNK):
        yield tasks_pb2.ImportTasksRequest(
            batch_id=start,
            tasks=[
                tasks_pb2.CreateTaskRequest(
                    queue=queue,
                    handler="noop",
                    run_at=to_timestamp(first_due + int(i * 1000 / rate)),
                )
                for i in range(start, min(n, start + _CHUNK))
            ],
        )


def _ingest(
    address: str, n: int, *, first_due: int, rate: float, queue: str, streams: int = 4
) -> float:
    """Load ``n`` tasks over ``streams`` concurrent ``ImportTasks`` streams; returns tasks/s."""
    share = [n // streams + (1 if i < n % streams else 0) for i in range(streams)]
    errors: list[BaseException] = []

    def one(index: int) -> None:
        offset = sum(share[:index])
        with grpc.insecure_channel(address) as ch:
            stub = tasks_pb2_grpc.TaskServiceStub(ch)
            try:
                due = first_due + int(offset * 1000 / rate)
                gen = _requests(share[index], due, rate, queue)
                for answer in stub.ImportTasks(gen, timeout=3600):
                    if answer.code or answer.rejected:
                        errors.append(RuntimeError(f"batch {answer.batch_id} refused in part"))
            except grpc.RpcError as exc:
                errors.append(exc)

    began = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"ingest failed: {errors[0]}")
    return n / (time.monotonic() - began)


def _pct(values: list[int], q: float) -> int:
    return values[min(len(values) - 1, int(len(values) * q))] if values else -1


def run_one(cfg: BenchConfig) -> Result:
    with tempfile.TemporaryDirectory(prefix="tikk-bench-") as tmp:
        work = Path(tmp)
        out = work / "lateness.txt"
        env = {**os.environ, "TIKK_BENCH_OUT": str(out), "PYTHONUNBUFFERED": "1"}
        tag = uuid.uuid4().hex[:8]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            address = _start(cfg, work, env, tag, procs)
            for _ in range(cfg.workers):
                procs.append(
                    _spawn(
                        ["worker", "examples.bench_worker:worker", "--server", address],
                        env,
                        work / "worker.log",
                    )
                )
            if cfg.stored:
                # Tasks due tomorrow: stored, never due during the run.
                tomorrow = int(time.time() * 1000) + 86_400_000
                _ingest(address, cfg.stored, first_due=tomorrow, rate=1e6, queue="idle")
            n = cfg.tasks
            lead_ms = max(10_000, int(n / 4000 * 1000) + 5_000)
            first_due = int(time.time() * 1000) + lead_ms
            ingest = _ingest(address, n, first_due=first_due, rate=cfg.rate, queue="bench")
            samples = _collect(out, n, first_due + int(n * 1000 / cfg.rate) + 60_000)
        finally:
            for p in reversed(procs):
                p.terminate()
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
    handler = sorted(s[0] for s in samples)
    queue = sorted(s[1] for s in samples)
    return Result(
        cfg.backend,
        cfg.tasks,
        cfg.stored,
        ingest,
        len(samples),
        _pct(handler, 0.5),
        _pct(handler, 0.99),
        handler[-1] if handler else -1,
        _pct(queue, 0.5),
        _pct(queue, 0.99),
        queue[-1] if queue else -1,
    )


def _start(
    cfg: BenchConfig,
    work: Path,
    env: dict[str, str],
    tag: str,
    procs: list[subprocess.Popen[bytes]],
) -> str:
    log = work / "server.log"
    shards = cfg.shards
    if cfg.backend == "embedded":
        p = _spawn(
            [
                "dev",
                "--data-dir",
                str(work / "data"),
                "--listen",
                "127.0.0.1:0",
                "--shards",
                str(shards),
            ],
            env,
            log,
        )
        procs.append(p)
        return _wait_port(log, p)
    urls = [
        "--store",
        f"cassandra://127.0.0.1:{stack.CQL_PORT}/tikk_bench_{tag}",
        "--history",
        f"cassandra://127.0.0.1:{stack.CQL_PORT}/tikk_bench_{tag}",
        "--queue",
        f"kafka://127.0.0.1:{stack.KAFKA_PORT}?prefix=bench{tag}.&partitions=8",
        "--ownership",
        f"zk://127.0.0.1:{stack.ZK_PORT}/tikk-bench-{tag}",
        "--shards",
        str(shards),
    ]
    migrate = subprocess.run(
        [sys.executable, "-m", "server.cli", "migrate", *urls],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=False,
    )
    if migrate.returncode:
        raise RuntimeError(f"migrate failed: {migrate.stdout!r} {migrate.stderr!r}")
    p = _spawn(["server", *urls, "--listen", "127.0.0.1:0"], env, log)
    procs.append(p)
    address = _wait_port(log, p)
    for _ in range(cfg.dispatchers):
        procs.append(_spawn(["dispatcher", *urls], env, work / "dispatcher.log"))
    return address


def _collect(out: Path, n: int, deadline_ms: int) -> list[tuple[int, int]]:
    samples: list[tuple[int, int]] = []
    while time.time() * 1000 < deadline_ms:
        if out.exists():
            lines = out.read_text().split("\n")
            samples = [(int(a), int(b)) for a, b in (x.split() for x in lines if x.strip())]
            if len(samples) >= n:
                break
        time.sleep(0.5)
    return samples


def print_results(results: list[Result]) -> None:
    print(
        f"\n{'backend':<10} {'tasks':>8} {'stored':>8} {'ingest/s':>9} {'fired':>8}"
        f" {'start p50':>9} {'p99':>6} {'max':>6} {'queue p50':>9} {'p99':>6} {'max':>6}"
    )
    for r in results:
        print(
            f"{r.backend:<10} {r.tasks:>8} {r.stored:>8} {r.ingest_per_s:>9.0f} {r.fired:>8}"
            f" {r.handler_p50:>9} {r.handler_p99:>6} {r.handler_max:>6} {r.queue_p50:>9}"
            f" {r.queue_p99:>6} {r.queue_max:>6}"
        )
    print("(lateness in ms: 'start' = due → handler start, 'queue' = due → handed to the queue)")
