"""The fault suite's ``ci`` mode on the stack ``make test`` started: one server, two
dispatchers and two workers under ``kill -9``, a dispatcher paused past its ZooKeeper session,
and Kafka and Cassandra stopped for a while (left alone with
``TIKK_FAULTS_SERVICE_FAULTS=0``, or when the tests' service addresses are not those of
``devtools.stack``, whose JVMs the suite would stop). Fails on any lost, early or
cancelled-but-run task, on inconsistent idempotency keys and on inexact retries or dead
letters, and prints the report either way. Then ``storm-ci``: the same faults, one of a random
kind every 10-15 s for two minutes at 120 tasks/s, held to the same promises; and, without the
stack, how a storm is planned and what its whole-run figures count."""

from __future__ import annotations

import itertools
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from devtools.faults import modes
from devtools.faults.lateness import whole_run
from devtools.faults.readback import StateReader
from devtools.faults.records import (
    ONE_NODE_FAULTS,
    WARM_UP_ID,
    Call,
    CreateRecord,
    FaultKind,
    FaultWindow,
    History,
    Start,
    TaskKind,
    TaskPlan,
)
from devtools.faults.suite import NAMESPACE, Run, run_suite, stack_addresses
from devtools.faults.workload import create_now, create_request
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, require

ROLES = {"server": ["server"], "dispatcher": ["d-0", "d-1"], "worker": ["w-0", "w-1"]}
T0 = 1_800_000_000_000


def _services() -> dict[str, str]:
    return {
        "cassandra": require("cassandra", CASSANDRA),
        "kafka": require("kafka", KAFKA),
        "zookeeper": require("zookeeper", ZOOKEEPER),
    }


def _stops_services(addresses: dict[str, str]) -> bool:
    """Whether the suite may stop Kafka and Cassandra: asked for, and they are the JVMs of
    ``devtools.stack`` (the only ones it knows how to stop and continue)."""
    wanted = os.environ.get("TIKK_FAULTS_SERVICE_FAULTS", "1") != "0"
    return wanted and addresses == stack_addresses()


def _seed() -> int:
    return int(os.environ.get("TIKK_FAULTS_SEED", random.randrange(1_000_000)))


# About 3.5 minutes; the suite gives up by itself after 10 (the mode's timeout_s).
@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_ci_fault_suite_loses_nothing_and_runs_nothing_early(tmp_path: Path) -> None:
    addresses = _services()
    mode = modes.ci()
    if not _stops_services(addresses):
        mode = mode.without_service_faults()
    result = run_suite(mode, seed=_seed(), workdir=tmp_path, addresses=addresses)
    print(result.report)
    assert result.info.incomplete is None, result.report
    assert not result.check.failed, result.report
    kills = dict(result.check.fault_counts)
    assert all(kills.get(f"kill {k}", 0) >= 3 for k in ("server", "dispatcher", "worker"))


# About 3 minutes; the suite gives up by itself after 10 (the mode's timeout_s).
@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_a_storm_loses_nothing_and_runs_nothing_early(tmp_path: Path) -> None:
    """``storm-ci``: faults come every 10-15 s, each before the stack has caught up with the
    last, and still no accepted task is lost, none starts early and no cancelled one runs.
    The storm must really have hit every kind of fault it deals (a deck of six, reshuffled
    each round: the two minutes see them all), as the nemesis recorded them."""
    addresses = _services()
    mode = modes.storm_ci()
    if not _stops_services(addresses):
        mode = mode.without_service_faults()
    result = run_suite(mode, seed=_seed(), workdir=tmp_path, addresses=addresses)
    print(result.report)
    assert result.info.incomplete is None, result.report
    r = result.check
    assert (len(r.lost), len(r.early), len(r.cancelled_but_ran)) == (0, 0, 0), result.report
    assert not r.failed, result.report
    hit = Counter(str(w.kind) for w in result.history.faults)
    assert set(hit) == {str(k) for k in mode.faults.kinds}, f"the storm dealt {dict(hit)}"


@pytest.mark.e2e
def test_a_tls_cluster_takes_a_task_through_every_process(tmp_path: Path) -> None:
    """``--tls``: the server serves TLS, the workers and the suite's clients trust its CA; the
    warm-up task goes through server, dispatcher, queue and worker (no faults)."""
    addresses = _services()
    run = Run(modes.ci().without_service_faults(), 1, tmp_path, addresses, tls=True)
    try:
        run.set_up()  # raises unless the warm-up task ran
        over_tls = StateReader(run.config.address, NAMESPACE, time.monotonic() + 60,
                               transport=run.config.transport)  # fmt: skip
        plaintext = StateReader(run.config.address, NAMESPACE, time.monotonic() + 5)
        try:
            assert over_tls.final(WARM_UP_ID).state == "SUCCEEDED"
            assert plaintext.final(WARM_UP_ID, attempts=2).state == "UNREADABLE"
        finally:
            over_tls.close()
            plaintext.close()
    finally:
        run.clean_up(keep_data=False)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_process_that_dies_on_its_own_is_started_again_and_counted(tmp_path: Path) -> None:
    """A worker killed behind the nemesis' back is a crash: recorded with its exit status,
    started again as a supervisor would, and then runs tasks again."""
    run = Run(modes.ci().without_service_faults(), 1, tmp_path, _services())
    try:
        run.set_up()
        worker = run.cluster.members["worker-0"]
        before = worker.incarnation
        assert run.cluster.revive_crashed() == []  # nothing ended: nothing to do
        os.killpg(worker.pid, signal.SIGKILL)
        assert worker.proc is not None
        worker.proc.wait(10)
        (crash,) = run.cluster.revive_crashed()
        assert (crash.role, crash.code) == ("worker-0", -signal.SIGKILL)
        assert worker.incarnation == before + 1 and worker.proc.poll() is None
        assert run.cluster.crashes == [crash]
        now = int(time.time() * 1000)
        plan = TaskPlan("after-crash", TaskKind.OK, now, now, True)
        request = create_request(plan, run.mode.workload, NAMESPACE)
        create_now(run.config.address, request, transport=run.config.transport)
        deadline = time.monotonic() + 60
        while not any(s.task_id == "after-crash" for s in run.starts.read()):
            assert time.monotonic() < deadline, "no task ran after the restart"
            time.sleep(0.2)
        assert worker.proc.poll() is None
    finally:
        run.clean_up(keep_data=False)


def test_a_storm_brings_every_kind_each_round_every_10_to_15_seconds() -> None:
    storm = modes.storm(300.0).faults
    plan = storm.plan(random.Random(11), ROLES)
    assert plan == storm.plan(random.Random(11), ROLES)  # a seed repeats it
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(plan)]
    assert all(10.0 <= g <= 15.0 for g in gaps)
    assert plan[0].at_s == 10.0 and plan[-1].at_s <= 290.0
    for n in range(0, len(plan) - 6, 7):  # each round of seven deals every kind once
        assert {f.kind for f in plan[n : n + 7]} == set(ONE_NODE_FAULTS)
    assert all(f.hold_s > 4 for f in plan if f.kind is FaultKind.PAUSE_DISPATCHER)
    calm = modes.storm_ci().without_service_faults().faults
    kinds = {f.kind for f in calm.plan(random.Random(11), ROLES)}
    assert FaultKind.STOP_KAFKA not in kinds and FaultKind.STOP_CASSANDRA not in kinds
    assert len(kinds) == 5 and not calm.service_faults


def test_whole_run_lateness_counts_every_attempt_and_says_where_it_arose() -> None:
    def start(task: str, due: int, fired: int, started: int, attempt: int = 1) -> Start:
        return Start(task, attempt, task, T0 + due, T0 + fired, T0 + started, "w-1")

    starts = (
        start("calm", 0, 10, 50),  # before any fault
        start("after-kill", 20_000, 20_100, 32_100),  # 12.1 s late, 12 s of it in the queue
        start("after-kill", 20_000, 20_100, 40_000),  # a duplicate: only the first counts
        start("retry", 21_000, 29_000, 29_500, attempt=2),  # 8.5 s, at the dispatcher
    )
    kill = FaultWindow(FaultKind.KILL_WORKER, "w-0", T0 + 19_000, T0 + 21_000, 7)
    creates = (
        CreateRecord("calm", TaskKind.OK, T0, False, 3, (Call(T0 - 900, T0 + 1_500, "OK"),)),
        CreateRecord("retry", TaskKind.FAIL_ONCE, T0, False, 3, (Call(T0, T0 + 5, "OK"),)),
    )
    w = whole_run(History(creates, (), starts, (kill,), (), frozenset()))
    assert (w.lateness.count, w.lateness.p50, w.lateness.max) == (3, 8_500, 12_100)
    assert (w.dispatch.max, w.delivery.max, w.late) == (8_000, 12_000, 1)
    by = dict(w.by_last_fault)
    assert (by["none"].count, by["kill worker"].count) == (1, 2)
    assert w.accepted_after_due == 1  # "calm" was accepted 1.5 s after its due time
    assert w.fault_every_ms is None  # one fault: no spacing
