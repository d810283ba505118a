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
import time
from pathlib import Path

import pytest

from devtools.faults import modes
from devtools.faults.readback import StateReader
from devtools.faults.records import WARM_UP_ID
from devtools.faults.suite import NAMESPACE, Run, run_suite, stack_addresses
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, require

pytestmark = pytest.mark.e2e


# About 3.5 minutes; the suite gives up by itself after 10 (the mode's timeout_s).
@pytest.mark.timeout(900)
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


def test_a_tls_cluster_takes_a_task_through_every_process(tmp_path: Path) -> None:
    """``--tls``: the server serves TLS, the workers and the suite's clients trust its CA; the
    warm-up task goes through server, dispatcher, queue and worker (no faults)."""
    addresses = {
        "cassandra": require("cassandra", CASSANDRA),
        "kafka": require("kafka", KAFKA),
        "zookeeper": require("zookeeper", ZOOKEEPER),
    }
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
