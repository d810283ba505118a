"""Every process checks the shard count stored with the data at start: one started with a
different ``--shards`` would strand tasks in shards nobody reads, so it refuses to start."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, Process
from tests.services import CASSANDRA, require, with_login

pytestmark = pytest.mark.e2e


def tikk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_processes_refuse_another_shard_count_on_cassandra(tmp_path: Path) -> None:
    url = with_login(
        f"cassandra://{require('cassandra', CASSANDRA)}/tikk_shards_{uuid.uuid4().hex[:8]}"
    )
    backend = ["--store", url, "--history", url, "--data-dir", str(tmp_path)]
    try:
        assert tikk("migrate", *backend, "--shards", "16").returncode == 0
        for command in (["dispatcher"], ["server", "--listen", "127.0.0.1:0"], ["migrate"]):
            done = tikk(*command, *backend, "--shards", "32")
            assert done.returncode == 1, done.stdout + done.stderr
            assert "created with 16 shards" in done.stderr
            assert "configured with 32" in done.stderr
            assert "Traceback" not in done.stderr
    finally:
        drop = f"DROP KEYSPACE IF EXISTS {url.rsplit('/', 1)[1]}"
        subprocess.run(
            [sys.executable, "-c", _DROP, CASSANDRA, drop], check=False, timeout=60, cwd=ROOT
        )


def test_processes_refuse_another_shard_count_on_sqlite(tmp_path: Path) -> None:
    data = ["--data-dir", str(tmp_path)]
    first = Process(["dev", *data, "--shards", "8", "--listen", "127.0.0.1:0"], {})
    first.wait_for(re.compile("listening on"))
    assert first.stop() == 0
    for command in (["dispatcher"], ["dev", "--listen", "127.0.0.1:0"]):
        done = tikk(*command, *data, "--shards", "4")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "created with 8 shards" in done.stderr
        assert "configured with 4" in done.stderr


_DROP = """
import sys
from cassandra.cluster import Cluster
host, port = sys.argv[1].rsplit(":", 1)
cluster = Cluster([host], port=int(port))
cluster.connect().execute(sys.argv[2])
cluster.shutdown()
"""
