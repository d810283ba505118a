"""The fault suite's ``ci`` mode on the stack ``make test`` started: one server, two
dispatchers and two workers under ``kill -9``, a dispatcher paused past its ZooKeeper session,
and Kafka and Cassandra stopped for a while (left alone with
``TIKK_FAULTS_SERVICE_FAULTS=0``, or when the tests' service addresses are not those of
``devtools.stack``, whose JVMs the suite would stop). Fails on any lost, early or
cancelled-but-run task, on inconsistent idempotency keys and on inexact retries or dead
letters, and prints the report either way."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from devtools.faults import modes
from devtools.faults.suite import run_suite, stack_addresses
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, require

pytestmark = pytest.mark.e2e


def test_ci_fault_suite_loses_nothing_and_runs_nothing_early(tmp_path: Path) -> None:
    addresses = {
        "cassandra": require("cassandra", CASSANDRA),
        "kafka": require("kafka", KAFKA),
        "zookeeper": require("zookeeper", ZOOKEEPER),
    }
    mode = modes.ci()
    if os.environ.get("TIKK_FAULTS_SERVICE_FAULTS", "1") == "0" or addresses != stack_addresses():
        mode = mode.without_service_faults()
    seed = int(os.environ.get("TIKK_FAULTS_SEED", random.randrange(1_000_000)))
    result = run_suite(mode, seed=seed, workdir=tmp_path, addresses=addresses)
    print(result.report)
    assert result.info.incomplete is None, result.report
    assert not result.check.failed, result.report
    kills = dict(result.check.fault_counts)
    assert all(kills.get(f"kill {k}", 0) >= 3 for k in ("server", "dispatcher", "worker"))
