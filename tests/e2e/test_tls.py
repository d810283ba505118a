"""Transport security against real processes: TLS and mTLS servers, the CLI, the Python
clients and a worker process over TLS, the exposure refusal, and ``tikk dev --tls``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.certs import DevPki, make_dev_pki
from tests.e2e.conftest import ROOT, Process
from tests.waiting import eventually
from tikk.client import AsyncClient, Client, NotFoundError, TaskSpec, Transport, UnavailableError
from tikk.v1 import tasks_pb2

pytestmark = pytest.mark.e2e

_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return make_dev_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    """A second CA, unrelated to ``pki``, with its own server and client certificates."""
    return make_dev_pki(tmp_path_factory.mktemp("other-pki"))


def _serve(command: str, data_dir: Path, *extra: str) -> tuple[Process, str]:
    env = {"TIKK_E2E_LOG": str(data_dir / "executions.jsonl"), "PYTHONUNBUFFERED": "1"}
    args = [command, "--data-dir", str(data_dir), "--shards", "8", "--listen", "127.0.0.1:0"]
    server = Process([*args, "--visibility-timeout", "4s", *extra], env)
    port = server.wait_for(_LISTENING).group(1)
    return server, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def tls_dev(tmp_path_factory: pytest.TempPathFactory, pki: DevPki) -> Iterator[tuple[str, Path]]:
    """``tikk dev`` (server and dispatcher) serving TLS with the test CA's certificate."""
    data_dir = tmp_path_factory.mktemp("tls-dev")
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    server, address = _serve("dev", data_dir, *tls)
    yield address, data_dir
    server.stop()


@pytest.fixture(scope="module")
def mtls_server(tmp_path_factory: pytest.TempPathFactory, pki: DevPki) -> Iterator[str]:
    """``tikk server`` requiring client certificates of the test CA."""
    data_dir = tmp_path_factory.mktemp("mtls")
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    server, address = _serve("server", data_dir, *tls, "--tls-client-ca", str(pki.ca_cert))
    yield address
    server.stop()


def test_the_cli_creates_imports_and_reads_over_tls(
    tls_dev: tuple[str, Path], pki: DevPki, tmp_path: Path
) -> None:
    address, _ = tls_dev
    over_tls = ["--server", address, "--tls-ca", str(pki.ca_cert)]
    created = cli("task", "create", "--queue", "later", "--handler", "h", "--id", "cli-1",
                  "--in", "1h", *over_tls)  # fmt: skip
    assert created.returncode == 0, created.stderr
    lines = tmp_path / "tasks.jsonl"
    rows = [{"queue": "later", "handler": "h", "task_id": f"imp-{n}"} for n in range(3)]
    lines.write_text("".join(json.dumps(row) + "\n" for row in rows))
    imported = cli("task", "import", str(lines), "--rejects", str(tmp_path / "r"), *over_tls)
    assert imported.returncode == 0, imported.stderr
    assert "3 accepted" in imported.stdout
    got = cli("task", "get", "imp-2", "--json", *over_tls)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["id"] == "imp-2"


def test_the_cli_without_the_ca_is_refused_as_unreachable(tls_dev: tuple[str, Path]) -> None:
    address, _ = tls_dev
    plaintext = cli("task", "get", "x", "--server", address, "--timeout", "3")
    assert plaintext.returncode == 3
    system_roots = cli("task", "get", "x", "--server", address, "--tls", "--timeout", "3")
    assert system_roots.returncode == 3


def test_the_python_clients_work_over_tls(tls_dev: tuple[str, Path], pki: DevPki) -> None:
    address, _ = tls_dev
    transport = Transport(ca_file=str(pki.ca_cert))
    with Client(address, transport=transport, namespace="tls") as client:
        made = client.create_task(TaskSpec("later", "h", b"x", task_id="py-1"))
        assert made.created

    async def read() -> tasks_pb2.Task:
        async with AsyncClient(address, transport=transport, namespace="tls") as client:
            return await client.get_task("py-1")

    assert asyncio.run(read()).handler == "h"


def test_a_client_trusting_another_ca_is_refused(
    tls_dev: tuple[str, Path], other_pki: DevPki
) -> None:
    address, _ = tls_dev
    with (
        Client(address, transport=Transport(ca_file=str(other_pki.ca_cert)), timeout=5) as c,
        pytest.raises(UnavailableError),
    ):
        c.get_task("py-1")


def test_a_worker_process_runs_tasks_over_tls(tls_dev: tuple[str, Path], pki: DevPki) -> None:
    address, data_dir = tls_dev
    env = {"TIKK_E2E_LOG": str(data_dir / "executions.jsonl"), "PYTHONUNBUFFERED": "1"}
    worker = Process(
        ["worker", "tests.e2e.worker_app:worker", "--server", address,
         "--tls-ca", str(pki.ca_cert)],
        env,
    )  # fmt: skip
    try:
        transport = Transport(ca_file=str(pki.ca_cert))
        with Client(address, transport=transport, namespace="tls-w") as client:
            client.create_task(TaskSpec("e2e", "record", b"p", task_id="w-1"))

            def succeeded() -> bool:
                return client.get_task("w-1").state == tasks_pb2.TASK_STATE_SUCCEEDED

            eventually(succeeded, timeout=60)
    finally:
        assert worker.stop() == 0, worker.output()


def test_a_worker_trusting_another_ca_says_the_handshake_was_refused(
    tls_dev: tuple[str, Path], other_pki: DevPki
) -> None:
    address, _ = tls_dev
    worker = Process(
        ["worker", "tests.e2e.worker_app:worker", "--server", address,
         "--tls-ca", str(other_pki.ca_cert)],
        {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        worker.wait_for(re.compile(r"refused the TLS handshake: check that --tls-ca"), 30)
    finally:
        worker.stop()
    assert "did not answer" not in worker.output()


@pytest.mark.parametrize("certificate", ["none", "wrong_ca"])
def test_mtls_refuses_a_client_without_a_certificate_of_its_ca(
    mtls_server: str, pki: DevPki, other_pki: DevPki, certificate: str
) -> None:
    transport = Transport(ca_file=str(pki.ca_cert))
    if certificate == "wrong_ca":
        transport = Transport(
            ca_file=str(pki.ca_cert),
            cert_file=str(other_pki.client_cert),
            key_file=str(other_pki.client_key),
        )
    with (
        Client(mtls_server, transport=transport, timeout=5) as client,
        pytest.raises(UnavailableError),
    ):
        client.get_task("anything")


def test_mtls_admits_a_client_certificate_of_its_ca(mtls_server: str, pki: DevPki) -> None:
    transport = Transport(
        ca_file=str(pki.ca_cert), cert_file=str(pki.client_cert), key_file=str(pki.client_key)
    )
    # The server answers: the handshake passed and the call reached the service.
    with (
        Client(mtls_server, transport=transport, timeout=5) as client,
        pytest.raises(NotFoundError),
    ):
        client.get_task("anything")
    over_mtls = ["--server", mtls_server, "--tls-ca", str(pki.ca_cert)]
    mine = ["--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]
    assert cli("task", "list", "--queue", "q", *over_mtls, *mine).returncode == 0
    assert cli("task", "list", "--queue", "q", "--timeout", "3", *over_mtls).returncode == 3


def test_an_exposed_plaintext_server_refuses_to_start_and_says_why(tmp_path: Path) -> None:
    common = ["server", "--data-dir", str(tmp_path), "--shards", "8", "--listen", "0.0.0.0:0"]
    refused = cli(*common)
    assert refused.returncode == 2
    assert "refusing to serve 0.0.0.0:0" in refused.stderr
    for needed in ("--tls-cert", "--auth", "--insecure"):
        assert needed in refused.stderr
    assert not (tmp_path / "tikk.db").exists(), "nothing may start before the refusal"
    server = Process([*common, "--insecure"], {"PYTHONUNBUFFERED": "1"})
    try:
        server.wait_for(_LISTENING)
    finally:
        assert server.stop() == 0


def test_tls_without_auth_on_an_exposed_address_names_what_is_missing(
    tmp_path: Path, pki: DevPki
) -> None:
    refused = cli("server", "--data-dir", str(tmp_path), "--listen", "[::]:0",
                  "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key))  # fmt: skip
    assert refused.returncode == 2
    assert "without authentication (--auth)" in refused.stderr
    assert "TLS (" not in refused.stderr


def test_a_key_of_another_certificate_is_refused_at_start(tmp_path: Path, pki: DevPki) -> None:
    refused = cli("server", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0",
                  "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.client_key))  # fmt: skip
    assert refused.returncode == 2
    assert "KEY_VALUES_MISMATCH" in refused.stderr
    assert "PRIVATE KEY" not in refused.stderr


@pytest.mark.parametrize("mtls", [False, True], ids=["tls", "mtls"])
def test_tikk_dev_tls_prints_a_ca_that_gets_clients_and_its_worker_through(
    tmp_path: Path, mtls: bool
) -> None:
    pki = DevPki.in_directory((tmp_path / "tls").resolve())
    extra = ["--tls-client-ca", str(pki.ca_cert)] if mtls else []
    worker = ["--worker", "tests.e2e.worker_app:worker"]
    server, address = _serve("dev", tmp_path, "--tls", *extra, *worker)
    try:
        ca = server.wait_for(re.compile(r"clients trust the development CA (\S+)")).group(1)
        assert ca == str(pki.ca_cert)
        mine = ["--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]
        created = cli("task", "create", "--queue", "e2e", "--handler", "record", "--id", "d-1",
                      "--server", address, "--tls-ca", ca, *(mine if mtls else []))  # fmt: skip
        assert created.returncode == 0, created.stderr
        transport = Transport(
            ca_file=ca,
            cert_file=str(pki.client_cert) if mtls else "",
            key_file=str(pki.client_key) if mtls else "",
        )
        with Client(address, transport=transport, timeout=5) as client:

            def succeeded() -> bool:
                # Run by the in-process worker, which reaches its server over the same TLS.
                return client.get_task("d-1").state == tasks_pb2.TASK_STATE_SUCCEEDED

            eventually(succeeded, timeout=60)
    finally:
        assert server.stop() == 0, server.output()


def test_every_process_of_a_group_serves_tls(tmp_path: Path, pki: DevPki) -> None:
    tls = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)]
    server, address = _serve("server", tmp_path, *tls, "--processes", "2")
    try:
        transport = Transport(ca_file=str(pki.ca_cert))
        # A connection of its own per client, so the kernel spreads them over both members.
        options = [("grpc.use_local_subchannel_pool", 1)]
        for _ in range(6):
            with (
                Client(address, transport=transport, timeout=10, options=options) as client,
                pytest.raises(NotFoundError),
            ):
                client.get_task("anything")
        assert cli("task", "get", "x", "--server", address, "--timeout", "3").returncode == 3
    finally:
        assert server.stop() == 0, server.output()
