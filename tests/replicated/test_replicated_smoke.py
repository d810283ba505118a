"""The fault suite's ``replicated-ci`` mode on the replicated stack: two servers, two
dispatchers and two workers while a Cassandra node, the Kafka broker leading a partition of
the workload's topic and the ZooKeeper leader are each killed with ``-9`` and started again,
and a dispatcher and a worker are killed. Fails on any lost, early or cancelled-but-run task,
on inconsistent idempotency keys and on inexact retries or dead letters; prints the report,
whose lateness figures the README quotes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from devtools.faults import modes
from devtools.faults.records import FaultKind
from devtools.faults.suite import run_suite, stack_addresses

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_the_loss_of_one_node_of_each_service_loses_nothing_and_runs_nothing_early(
    tmp_path: Path,
) -> None:
    mode = modes.replicated_ci()
    seed = int(os.environ.get("TIKK_FAULTS_SEED", random.randrange(1_000_000)))
    result = run_suite(mode, seed=seed, workdir=tmp_path, addresses=stack_addresses(3))
    print(result.report)
    assert result.info.incomplete is None, result.report
    assert not result.check.failed, result.report
    hit = dict(result.check.fault_counts)
    for kind in (
        FaultKind.KILL_CASSANDRA_NODE,
        FaultKind.KILL_KAFKA_LEADER,
        FaultKind.KILL_ZOOKEEPER_LEADER,
    ):
        assert hit.get(str(kind), 0) == 1, result.report
