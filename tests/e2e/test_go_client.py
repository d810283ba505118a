"""The Go client (clients/go) against real processes: ``tikk dev`` with a worker, a
``tikk server --auth`` serving TLS with a token made by ``tikk auth``, and two ``tikk server``
processes on one data directory, which the failover test pauses and kills. The Go tests skip
without their servers; this runs them with the servers' addresses and checks that each one
ran and passed (``go test -json``), none skipped.

Go is the machine's (/usr/local/go); the modules come through the Go module proxy (the first
run compiles gRPC, later ones use the build cache). Without Go the test is skipped, and fails
under CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.auth_stack import AuthStack, Token
from tests.e2e.cluster import Cluster
from tests.e2e.conftest import ROOT, Stack
from tests.services import in_ci

pytestmark = pytest.mark.e2e

MODULE = ROOT / "clients" / "go"
# The tests of the wrapper package that need the servers, and those that need none.
SERVER_TESTS = (
    "TestCreateWithAClientIDTwiceIsOneTask",
    "TestGetTask",
    "TestCancelTask",
    "TestExecutionTimeoutAndStopTask",
    "TestListTasks",
    "TestImportTasksAllArrive",
    "TestHistoryAfterATaskRan",
    "TestScheduleAndItsPreview",
    "TestTLSWithAToken",
    "TestFailoverBetweenTwoRealServers",
)
UNIT_TESTS = (
    "TestIsLoopback",
    "TestATokenGoesInClearOnlyToLoopback",
    "TestAnUnreachableServerIsUnavailable",
    "TestImportKeepsAtMostWindowBatchesUnanswered",
    "TestStoppingAnImportEarlyEndsItsStream",
    "TestOneAddressIsDialledAsGiven",
    "TestAListOfAddressesIsBalanced",
    "TestAListGRPCCannotDialIsRefusedNamingTheEntry",
    "TestATokenGoesInClearOnlyToAListOfLoopbackServers",
    "TestTLSToSeveralHostsNeedsTheNameTheirCertificatesShare",
    "TestOnlyCallsSafeToRepeatAreRepeated",
)
# The whole go test run: the first one downloads and compiles gRPC on a small machine.
GO_TEST_TIMEOUT = 900


def go_binary() -> str:
    """The Go toolchain; without it the test skips, or fails under CI."""
    found = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists():
        message = "no Go toolchain (expected /usr/local/go/bin/go) to test clients/go with"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


@dataclass
class TlsServer:
    address: str
    ca_file: Path
    token: Token


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """``tikk server --auth`` serving TLS, and a token that may write namespace go-tls."""
    auth = AuthStack(tmp_path_factory.mktemp("go-tls"))
    _, token = auth.create("go-client", "write:go-tls")
    address = auth.start_server(*auth.tls_args())
    yield TlsServer(address, auth.pki().ca_cert, token)
    auth.close()


@pytest.fixture(scope="module")
def two_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two ``tikk server`` processes on one data directory, for the failover test, which
    pauses and kills the second."""
    cluster = Cluster(tmp_path_factory.mktemp("go-failover"), dispatcher=False)
    cluster.start()
    yield cluster
    cluster.close()


def go_test(
    go: str, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """``go test -json`` of the module; the run and each test's last action (pass, fail,
    skip) by name."""
    done = subprocess.run(
        [go, "test", "-count=1", "-json", "./..."],
        cwd=MODULE,
        env={**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-modcacherw",
             "PATH": f"{Path(go).parent}:{os.environ.get('PATH', '')}", **env},
        capture_output=True,
        text=True,
        timeout=GO_TEST_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    outcomes: dict[str, str] = {}
    for line in done.stdout.splitlines():
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("Test") and event.get("Action") in ("pass", "fail", "skip"):
            outcomes[event["Test"]] = event["Action"]
    return done, outcomes


def output_of(done: subprocess.CompletedProcess[str]) -> str:
    """What the Go tests printed (their Output events), and go's own errors."""
    lines = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    printed = "".join(event.get("Output", "") for event in lines)
    return (printed + done.stderr)[-6000:]


def test_the_go_client_passes_its_tests_against_real_servers(
    stack: Stack, tls_server: TlsServer, two_servers: Cluster
) -> None:
    go = go_binary()
    env = {
        "TIKK_ADDR": stack.address,
        "TIKK_TLS_ADDR": tls_server.address,
        "TIKK_CA": str(tls_server.ca_file),
        "TIKK_TOKEN": tls_server.token,
        **two_servers.failover_env(),
    }
    done, outcomes = go_test(go, env)
    assert done.returncode == 0, output_of(done)
    expected = {name: "pass" for name in SERVER_TESTS + UNIT_TESTS}
    assert {name: outcomes.get(name) for name in expected} == expected, output_of(done)
    assert [name for name, action in outcomes.items() if action != "pass"] == []
