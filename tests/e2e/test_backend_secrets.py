"""A server whose queue URL carries an inline password (from its config file) never shows it:
not in its banner, not in the URL ``GetWorkerConfig`` hands to workers. A worker then brings
its own secret (``--queue-url``), and one without it stops at start with a clear line."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from devtools import stack
from tests.e2e.conftest import ROOT, Process
from tests.services import KAFKA, require, with_login
from tikk.v1 import worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.e2e


@pytest.fixture
def secured_server(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """A ``tikk dev`` on SQLite with the authenticated stack's Kafka as its queue, given with
    an inline password in a config file: (address, password, queue URL with its file)."""
    if stack.variant() != stack.AUTH:
        pytest.skip("the stack runs without authentication (python -m devtools stack up --plain)")
    require("kafka", KAFKA)
    password = stack.secret_file("kafka").read_text().strip()
    with_file = with_login(f"kafka://{KAFKA}?prefix=secret{uuid.uuid4().hex[:6]}.&partitions=2")
    inline = with_file.replace(
        f"{stack.USER}@", f"{stack.USER}:{urllib.parse.quote(password, safe='')}@"
    ).replace(f"&password_file={stack.secret_file('kafka')}", "")
    config = tmp_path / "tikk.toml"
    config.write_text(f'[backends]\nqueue = "{inline}"\n')
    config.chmod(0o600)
    server = Process(
        ["dev", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--config", str(config)],
        {"PYTHONUNBUFFERED": "1"},
    )
    try:
        port = server.wait_for(re.compile(r"listening on [\d.]+:(\d+)"), timeout=60).group(1)
        server.wait_for(re.compile(r"^\s+queue "), timeout=10)
        yield f"127.0.0.1:{port}", password, with_file
    finally:
        server.stop()
        leaked = password in server.output()
        assert not leaked, "the server printed the queue password"


def test_get_worker_config_and_the_banner_never_carry_the_password(
    secured_server: tuple[str, str, str],
) -> None:
    address, password, _ = secured_server
    with grpc.insecure_channel(address) as channel:
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        config = stub.GetWorkerConfig(worker_pb2.GetWorkerConfigRequest(), timeout=10)
    leaked = password in str(config)  # not in the assertion: a failure must not print it
    assert not leaked, "GetWorkerConfig handed out the queue password"
    assert config.queue_url.startswith(f"kafka://{stack.USER}@{KAFKA}?")
    assert "sasl=SCRAM-SHA-256" in config.queue_url


def _worker(address: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", "worker", "tests.e2e.worker_app:worker",
         "--server", address, "--burst", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_worker_brings_its_own_queue_secret(secured_server: tuple[str, str, str]) -> None:
    address, password, with_file = secured_server
    # Without a secret of its own the handed-out URL names a user but no password.
    alone = _worker(address)
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert "has no password" in alone.stderr.strip().splitlines()[-1]
    # With its own password file it logs in to the server's queue and consumes (until empty).
    own = _worker(address, "--queue-url", with_file)
    assert own.returncode == 0, own.stdout + own.stderr
    leaked = password in own.stdout + own.stderr
    assert not leaked, "the worker printed the queue password"
