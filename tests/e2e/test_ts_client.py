"""The TypeScript client (``clients/typescript``) against real processes: its node tests run
with ``tikk dev`` and a worker on plaintext loopback (the ``stack`` fixture), with a
``tikk dev --auth`` serving TLS whose token comes from the real ``tikk auth create``, and with
two ``tikk server`` processes on one data directory, which the failover test pauses and
kills.

The node tests skip themselves without a server, so this test reads their TAP report and
requires every expected test to have run and passed, none skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.auth_stack import LISTENING, AuthStack
from tests.e2e.cluster import Cluster
from tests.e2e.conftest import ROOT, Process, Stack
from tests.services import in_ci

pytestmark = pytest.mark.e2e

PACKAGE = ROOT / "clients" / "typescript"
SCRIPT = ROOT / "scripts" / "ts-client.sh"
# The namespace the TLS server's token may write (and so read).
TLS_NAMESPACE = "ts-tls"
EXPECTED = (
    "create with a client id twice makes one task",
    "get returns the task and a missing one is NOT_FOUND",
    "cancel cancels a scheduled task",
    "a task keeps its own execution timeout",
    "list pages through a queue's tasks",
    "an ImportTasks stream of 3000 tasks all arrive",
    "an import reads its input only as fast as the server answers",
    "an import stopped early or whose input fails ends its stream",
    "history lists the run of a task a worker ran",
    "a schedule and its preview of next fire times",
    "TLS with a token creates, gets and imports",
    "TLS without a token is UNAUTHENTICATED, unary and streaming",
    "a token is not sent in clear to a remote address",
    "one address is dialled as given, a list and a DNS name are balanced",
    "a list gRPC cannot dial is refused naming the entry",
    "a token goes in clear only to loopback servers, TLS to several hosts needs their name",
    "calls on a killed server move to the other only when safe",
)
_TAP_LINE = re.compile(r"^\s*(not ok|ok) \d+ - (.*?)(?: # (SKIP|TODO)\b.*)?$")


@dataclass(frozen=True)
class TlsServer:
    address: str
    ca: Path
    token: str


def require_node_modules() -> None:
    """Node and the package's dependencies, or a skip (a failure in CI) saying how to get them."""
    if shutil.which("node") and (PACKAGE / "node_modules" / ".bin" / "tsc").exists():
        return
    message = "node or clients/typescript/node_modules is missing; run: scripts/ts-client.sh deps"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """``tikk dev`` over TLS (the development PKI) requiring a credential, and a token that
    may write ``TLS_NAMESPACE``."""
    auth = AuthStack(tmp_path_factory.mktemp("ts-tls"))
    _, token = auth.create("ts-client", f"write:{TLS_NAMESPACE}")
    server = Process(
        ["dev", *auth.backend_args(), "--listen", "127.0.0.1:0", "--shards", "8", "--auth",
         *auth.tls_args()],
        {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        port = server.wait_for(LISTENING, timeout=60).group(1)
        yield TlsServer(f"127.0.0.1:{port}", auth.pki().ca_cert, token)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two ``tikk server`` processes on one data directory, for the failover test, which
    pauses and kills the second."""
    cluster = Cluster(tmp_path_factory.mktemp("ts-failover"), dispatcher=False)
    cluster.start()
    yield cluster
    cluster.close()


def tap_outcomes(tap: str) -> dict[str, str]:
    """Each test of a TAP report by name: "ok", "not ok", "SKIP" or "TODO"."""
    outcomes: dict[str, str] = {}
    for line in tap.splitlines():
        if m := _TAP_LINE.match(line):
            name = m.group(2).replace("\\#", "#").replace("\\\\", "\\")
            outcomes[name] = m.group(3) or m.group(1)
    return outcomes


def run_node_tests(
    stack: Stack, tls: TlsServer, two: Cluster, tap: Path
) -> subprocess.CompletedProcess[str]:
    env = {
        **two.failover_env(),
        **os.environ,
        "TIKK_ADDR": stack.address,
        "TIKK_TLS_ADDR": tls.address,
        "TIKK_CA": str(tls.ca),
        "TIKK_TOKEN": tls.token,
        "TIKK_TLS_NAMESPACE": TLS_NAMESPACE,
    }
    reporters = ["--test-reporter=spec", "--test-reporter-destination=stdout",
                 "--test-reporter=tap", f"--test-reporter-destination={tap}"]  # fmt: skip
    return subprocess.run(
        ["bash", str(SCRIPT), "test", *reporters],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_the_typescript_client_against_real_servers(
    stack: Stack, tls_server: TlsServer, two_servers: Cluster, tmp_path: Path
) -> None:
    require_node_modules()
    tap = tmp_path / "node-tests.tap"
    done = run_node_tests(stack, tls_server, two_servers, tap)
    report = f"{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, report
    outcomes = tap_outcomes(tap.read_text())
    missing = [name for name in EXPECTED if name not in outcomes]
    assert not missing, f"never ran: {missing}\n{report}"
    not_passed = {name: outcome for name, outcome in outcomes.items() if outcome != "ok"}
    assert not not_passed, f"did not pass: {not_passed}\n{report}"


def test_the_tap_report_is_read_by_name_and_outcome() -> None:
    tap = "\n".join([
        "TAP version 13",
        "ok 1 - create \\# one",
        "not ok 2 - get",
        "    ok 1 - nested",
        "ok 3 - tls # SKIP TIKK_TLS_ADDR is not set",
        "# pass 2",
    ])  # fmt: skip
    assert tap_outcomes(tap) == {"create # one": "ok", "get": "not ok", "nested": "ok",
                                 "tls": "SKIP"}  # fmt: skip
