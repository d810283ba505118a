"""One run of the fault suite, from an empty keyspace to the report.

Phases: check the stack answers → snapshot the code and start the cluster → one warm-up task
end to end → the workload and, meanwhile, the nemesis → wait for the creates to settle →
drain (until every accepted task's last attempt started and the states are final, or the
drain period ends) → read the final states back → check.

Whatever happens, the ``finally`` continues what was paused or stopped (waiting until the
services answer), kills the cluster and drops the run's keyspace, topics and ZooKeeper chroot.
A hard timeout (SIGALRM, main thread) bounds the run; a run cut short once the workload had
started is still checked and reported, marked incomplete (which fails it).
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from devtools import stack
from devtools.faults import services as svc
from devtools.faults.checker import CheckResult, check
from devtools.faults.cluster import (
    Cluster,
    ClusterConfig,
    describe_code,
    free_ports,
    snapshot_code,
)
from devtools.faults.modes import Mode
from devtools.faults.nemesis import FaultSchedule, Nemesis
from devtools.faults.nodes import NodeFaults, check_can_cut_off
from devtools.faults.readback import TERMINAL, StartLog, StateReader, still_expected
from devtools.faults.records import (
    WARM_UP_ID,
    CancelRecord,
    FaultKind,
    FinalState,
    History,
    TaskKind,
    TaskPlan,
    write_history,
)
from devtools.faults.report import RunInfo, render
from devtools.faults.services import ServiceStopper
from devtools.faults.whereabouts import locate
from devtools.faults.worker_app import QUEUE
from devtools.faults.workload import Workload, create_now, create_request, plan_tasks

log = logging.getLogger("devtools.faults")
NAMESPACE = "faults"
RECORDS_FILE = "records.jsonl"
# Final states are read at this many tasks per second at least, or the rest is UNREADABLE.
READBACK_RATE = 100


class SuiteTimeout(Exception):
    """The run hit its hard timeout."""


@dataclass(frozen=True)
class SuiteResult:
    check: CheckResult
    report: str
    history: History
    info: RunInfo

    @property
    def failed(self) -> bool:
        """A violation was found, or the run did not complete."""
        return self.check.failed or self.info.incomplete is not None


def stack_addresses(nodes: int = 1) -> dict[str, str]:
    """Where ``devtools.stack`` runs the services with ``nodes`` nodes each: ``host:port``,
    or every node's, comma-separated (ports follow its environment settings)."""
    return {name: stack.addresses(name, nodes) for name in ("cassandra", "kafka", "zookeeper")}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _cancel_alarm() -> None:
    """No hard timeout any more: the clean-up must not be cut short."""
    if _in_main_thread():
        signal.alarm(0)


@contextlib.contextmanager
def hard_timeout(seconds: float) -> Iterator[None]:
    """Raise ``SuiteTimeout`` in the main thread after ``seconds`` (no-op elsewhere), after
    printing every thread's stack to stderr to show where the run was stuck."""
    if not _in_main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        raise SuiteTimeout(f"the run exceeded its hard timeout of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(seconds)))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Run:
    """The state of one run, so the phases can be small methods and the clean-up can see
    everything that was started."""

    def __init__(
        self,
        mode: Mode[FaultSchedule],
        seed: int,
        workdir: Path,
        addresses: dict[str, str],
        git_rev: str | None = None,
        *,
        tls: bool = False,
    ) -> None:
        self.mode = mode
        self.git_rev = git_rev
        self.seed = seed
        self.rng = random.Random(seed)
        self.addresses = addresses
        self.config = ClusterConfig(
            cassandra=addresses["cassandra"],
            kafka=addresses["kafka"],
            zookeeper=addresses["zookeeper"],
            tag=uuid.uuid4().hex[:8],
            workdir=workdir,
            ports=free_ports(mode.servers),
            code_dir=workdir / "code",
            tls=tls,
            replicas=mode.nodes,
            shards=mode.shards,
        )
        self.cluster = Cluster(self.config)
        nodes = None
        if mode.nodes > 1:
            topic = f"{self.config.topic_prefix}{QUEUE}"
            nodes = NodeFaults(topic, stack.login(f"kafka://{self.config.kafka}"))
        self.nemesis = Nemesis(self.cluster, ServiceStopper(addresses), nodes)
        self.starts = StartLog(self.config.start_log)
        self.plans: list[TaskPlan] = []
        self.workload: Workload | None = None
        self.finals: dict[str, FinalState] = {}
        self.dead_letters: frozenset[str] = frozenset()
        self.incomplete: str | None = None
        self.notes: list[str] = [f"code under test: {describe_code(git_rev)}"]

    def set_up(self) -> None:
        """Stack answering, cluster up, one task through it."""
        self.preflight()
        snapshot_code(self.config.code_dir, self.git_rev)
        self.cluster.start()
        self.warm_up()

    def preflight(self) -> None:
        """Every service answers (waiting a while: an earlier run may just have resumed
        one); service faults only against the services ``devtools.stack`` runs."""
        for name, address in self.addresses.items():
            svc.wait_answering(name, address, timeout_s=120)
        stack_runs = stack_addresses(self.mode.nodes)
        if self.mode.faults.service_faults and self.addresses != stack_runs:
            raise ValueError(
                "service faults stop the JVMs of devtools.stack, but the run uses other "
                f"addresses ({self.addresses} != {stack_runs}); disable them"
            )
        if FaultKind.PARTITION_NODE in self._kinds_planned():
            check_can_cut_off()

    def _kinds_planned(self) -> set[FaultKind]:
        """The kinds of fault the run's plan deals (planned on a copy of the seeded draws,
        which ``load_and_break`` then makes for real)."""
        probe = random.Random()
        probe.setstate(self.rng.getstate())
        return {fault.kind for fault in self.mode.faults.plan(probe, self._roles())}

    def _roles(self) -> dict[str, list[str]]:
        """The cluster's roles by kind, as a fault plan draws its targets from them."""
        return {k: self.cluster.roles(k) for k in ("server", "dispatcher", "worker")}

    def warm_up(self, timeout_s: float = 120.0) -> None:
        """One task through server, dispatcher, queue and worker before the clock starts."""
        now = _now_ms()
        plan = TaskPlan(WARM_UP_ID, TaskKind.OK, now, now, True)
        request = create_request(plan, self.mode.workload, NAMESPACE)
        create_now(self.config.address, request, transport=self.config.transport)
        deadline = time.monotonic() + timeout_s
        while not any(s.task_id == WARM_UP_ID for s in self.starts.read()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the warm-up task did not run within {timeout_s:.0f} s")
            time.sleep(0.2)

    def execute(self) -> None:
        """Workload, faults, drain, read-back. A failure from here on is recorded (the run
        is incomplete) rather than raised, so what was recorded is still checked."""
        try:
            self.load_and_break()
            self.drain()
            self.read_back()
            self.locate_lost()
        except Exception as exc:
            self.incomplete = f"{type(exc).__name__}: {exc}"
            log.error("run incomplete: %s", self.incomplete)

    def load_and_break(self) -> None:
        """The workload from now on, and the nemesis meanwhile (in this thread, which
        started the processes and so must outlive them)."""
        spec = self.mode.workload
        self.plans = plan_tasks(spec, self.rng, _now_ms() + 500)
        self.workload = Workload(
            self.config.address, NAMESPACE, self.plans, spec, self.config.transport
        )
        origin = time.monotonic()
        self.workload.start()
        self.nemesis.run(self.mode.faults.plan(self.rng, self._roles()), origin)
        deadline = time.monotonic() + spec.duration_s + spec.retry_budget_s + 60
        while self.workload.pacing and time.monotonic() < deadline:
            time.sleep(1.0)
            self.cluster.revive_crashed()
        if not self.workload.join(timeout_s=max(1.0, deadline - time.monotonic())):
            self.notes.append("creates still retrying at the end were cut short")

    def drain(self) -> None:
        """Wait until every accepted task's last attempt started, or until the drain
        period after the last due time ends."""
        assert self.workload is not None
        creates, cancels = self.workload.records()
        maybe_cancelled = _maybe_cancelled(cancels) | self._bulk_cancelled()
        while _now_ms() < self._drain_until_ms() and still_expected(
            creates, maybe_cancelled, self.starts.read()
        ):
            time.sleep(1.0)
            self.cluster.revive_crashed()

    def _bulk_cancelled(self) -> set[str]:
        """Tasks of the bulk cancels' batches that are CANCELLED now (the others must run)."""
        assert self.workload is not None
        batched = [t for b in self.workload.bulk_records() for t in b.task_ids]
        reader = StateReader(
            self.config.address, NAMESPACE, time.monotonic() + 60, transport=self.config.transport
        )
        try:
            return {t for t, f in reader.finals(batched).items() if f.state == "CANCELLED"}
        finally:
            reader.close()

    def _drain_until_ms(self) -> int:
        return max(p.due_ms for p in self.plans) + int(self.mode.drain_s * 1000)

    def read_back(self) -> None:
        """Final states of every accepted task (re-read while some are still moving and
        the drain period lasts), and the dead letters."""
        assert self.workload is not None
        creates, _ = self.workload.records()
        ids = [c.task_id for c in creates if c.accepted]
        budget = max(120.0, len(ids) / READBACK_RATE)
        reader = StateReader(
            self.config.address, NAMESPACE, time.monotonic() + budget,
            transport=self.config.transport,
        )  # fmt: skip
        try:
            self.finals = reader.finals(ids)
            while _now_ms() < self._drain_until_ms() and (moving := _not_final(self.finals)):
                time.sleep(2.0)
                self.cluster.revive_crashed()
                self.finals.update(reader.finals(moving))
            self.dead_letters = reader.dead_letters()
        finally:
            reader.close()

    def locate_lost(self) -> None:
        """Where the rows of each task still expected and not final are (``whereabouts``),
        in the report's notes, read before the run's data is dropped."""
        assert self.workload is not None
        creates, cancels = self.workload.records()
        expected = set(still_expected(creates, _maybe_cancelled(cancels), self.starts.read()))
        lost = sorted(expected & set(_not_final(self.finals)))
        if not lost:
            return
        try:
            lines = locate(self.config.store_url, self.config.shards, NAMESPACE, lost)
        except Exception as exc:  # a diagnosis that fails must not fail the run it explains
            lines = [f"could not be read ({type(exc).__name__}: {exc})"]
        self.notes += [f"where lost: {line}" for line in lines]

    def history(self) -> History:
        """What was recorded (also after a failure: what there is)."""
        self.notes += [f"crashed on its own: {e}" for e in self.cluster.exited()]
        creates, cancels = self.workload.records() if self.workload else ((), ())
        starts = [s for s in self.starts.read() if s.task_id != WARM_UP_ID]
        if self.starts.malformed:
            self.notes.append(f"{self.starts.malformed} start-log lines cut short by a kill")
        return History(
            creates=creates,
            cancels=cancels,
            starts=tuple(starts),
            faults=tuple(self.nemesis.windows),
            finals=tuple(self.finals.values()),
            dead_letters=self.dead_letters,
            bulk_cancels=self.workload.bulk_records() if self.workload else (),
            crashes=tuple(self.cluster.crashes),
        )

    def clean_up(self, keep_data: bool) -> None:
        """Undo every fault, kill the cluster, drop the run's data."""
        try:
            restored = self.nemesis.restore()
            if restored:
                self.notes.append(f"restored after the run: {', '.join(restored)}")
        finally:
            if self.workload is not None:
                self.workload.close()
            self.cluster.close()
            if not keep_data:
                self._drop_data()

    def _drop_data(self) -> None:
        c = self.config
        svc.best_effort(
            "drop keyspace", lambda: svc.drop_cassandra_keyspace(c.cassandra, c.keyspace)
        )
        svc.best_effort("delete chroot", lambda: svc.delete_zookeeper_chroot(c.zookeeper, c.chroot))
        topics = [f"{c.topic_prefix}faults", f"{c.topic_prefix}faults.dlq"]
        svc.best_effort("delete topics", lambda: svc.delete_kafka_topics(c.kafka, topics))


def _maybe_cancelled(cancels: Iterable[CancelRecord]) -> set[str]:
    """Tasks a cancel may have reached: acknowledged, or sent and never answered."""
    return {c.task_id for c in cancels if c.ok or c.indeterminate}


def _not_final(finals: dict[str, FinalState]) -> list[str]:
    return [t for t, f in finals.items() if f.state not in TERMINAL]


def run_suite(
    mode: Mode[FaultSchedule],
    *,
    seed: int,
    workdir: Path,
    addresses: dict[str, str] | None = None,
    keep_data: bool = False,
    git_rev: str | None = None,
    tls: bool = False,
) -> SuiteResult:
    """Run ``mode`` once and check it, on the working tree's code or on ``git_rev``'s.
    Raises if the run could not start (the stack not answering, a process that would not
    start, the hard timeout before the workload). ``tls``: the cluster serves TLS."""
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    run = Run(mode, seed, workdir, addresses or stack_addresses(mode.nodes), git_rev, tls=tls)
    with hard_timeout(mode.timeout_s):
        try:
            run.set_up()
            run.execute()
            history = run.history()
        finally:
            _cancel_alarm()
            run.clean_up(keep_data)
    write_history(history, workdir / RECORDS_FILE)
    result = check(history, mode.after_ms)
    info = RunInfo(
        mode=mode.name,
        seed=seed,
        wall_s=time.monotonic() - began,
        workdir=str(workdir),
        planned_tasks=len(run.plans),
        rate_per_s=mode.workload.rate_per_s,
        notes=tuple(run.notes),
        incomplete=run.incomplete,
    )
    return SuiteResult(result, render(result, info), history, info)
