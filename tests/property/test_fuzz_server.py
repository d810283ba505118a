"""The fuzz target in CI: every RPC of every tikk service, on a real ``tikk dev`` process,
gets generated messages and raw bytes; each call must end in a defined status (not UNKNOWN,
INTERNAL, a hang or UNIMPLEMENTED) and the server must still serve afterwards.

A few examples per RPC here (the ``ci`` profile bounds the whole module to well under a
minute); ``python -m devtools.fuzz --minutes N`` runs the same checks for longer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from devtools.fuzz.messages import raw_bytes, serialized_requests
from devtools.fuzz.target import (
    FORBIDDEN,
    Connection,
    Rpc,
    ServerProcess,
    all_rpcs,
    call,
    seed,
    serving,
)

RPCS = all_rpcs()
# A share of the profile's examples per RPC and kind: every RPC x 2 kinds run in this module.
_PROFILE = settings()
_EXAMPLES = max(5, _PROFILE.max_examples // 4)
_FIXTURE_OK = [*_PROFILE.suppress_health_check, HealthCheck.function_scoped_fixture]


class Target:
    def __init__(self, server: ServerProcess, conn: Connection) -> None:
        self.server, self.conn, self.channel = server, conn, conn.channel()

    def status_of(self, rpc: Rpc, requests: list[bytes]) -> grpc.StatusCode:
        code = call(self.channel, self.conn, rpc, requests)
        assert self.server.alive(), f"{rpc.path} killed the server:\n{self.server.output()}"
        return code


def _operator_token(data_dir: Path) -> str:
    """A credential covering every RPC (``tikk auth create`` on the server's store), so that
    every request passes the authorization interceptor and is fuzzed through it."""
    token_file = data_dir / "fuzz.token"
    subprocess.run(
        [sys.executable, "-m", "server.cli", "auth", "create", "--name", "fuzz",
         "--role", "admin:*", "--role", "worker:*", "--token-file", str(token_file),
         "--data-dir", str(data_dir)],
        check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return token_file.read_text().strip()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The server runs with ``--auth``: the interceptor reads each request's namespace or
    queue, so it meets every generated request before the servicer does."""
    data_dir = Path(tmp_path_factory.mktemp("fuzz"))
    token = _operator_token(data_dir)
    with ServerProcess(data_dir, ["--auth"]) as server:
        t = Target(server, Connection(server.address(), token=token))
        seed(t.channel, t.conn)
        yield t
        assert serving(t.channel, t.conn), "the server stopped serving:\n" + server.output()
        found = server.tracebacks()
        assert not found, f"{len(found)} unhandled exception(s) in the server, first:\n{found[0]}"
        t.channel.close()


@pytest.mark.parametrize("rpc", RPCS, ids=lambda r: r.path.rsplit(".", 1)[-1])
@settings(max_examples=_EXAMPLES, suppress_health_check=_FIXTURE_OK)
@given(data=st.data())
def test_generated_messages_end_in_a_defined_status(
    target: Target, rpc: Rpc, data: st.DataObject
) -> None:
    requests = data.draw(serialized_requests(rpc.request, rpc.client_streaming))
    code = target.status_of(rpc, requests)
    assert code not in FORBIDDEN, f"{rpc.path} answered {code.name}:\n{target.server.output(20)}"


@pytest.mark.parametrize("rpc", RPCS, ids=lambda r: r.path.rsplit(".", 1)[-1])
@settings(max_examples=_EXAMPLES, suppress_health_check=_FIXTURE_OK)
@given(chunks=st.lists(raw_bytes(), max_size=3))
@example(chunks=[b"\xff"])  # not a message: gRPC's own parse failure was UNKNOWN
@example(chunks=[b"\x0a\x02\xc3\x28"])  # a string field that is not UTF-8
# A message, then a malformed one: aborting from the servicer's reader task hung the call.
@example(chunks=[b"", b"9\x1cJ\xf8#\xb3\xf5"])
def test_raw_bytes_end_in_a_defined_status(target: Target, rpc: Rpc, chunks: list[bytes]) -> None:
    requests = chunks if rpc.client_streaming else chunks[:1] or [b""]
    code = target.status_of(rpc, requests)
    assert code not in FORBIDDEN, f"{rpc.path} answered {code.name}:\n{target.server.output(20)}"


@pytest.mark.parametrize("rpc", RPCS, ids=lambda r: r.path.rsplit(".", 1)[-1])
def test_a_request_that_does_not_parse_is_invalid_argument(target: Target, rpc: Rpc) -> None:
    assert target.status_of(rpc, [b"\xff"]) is grpc.StatusCode.INVALID_ARGUMENT


def test_every_service_of_the_contract_is_fuzzed() -> None:
    services = {r.path.split("/")[1] for r in RPCS}
    assert services == {
        "tikk.v1.TaskService", "tikk.v1.HistoryService", "tikk.v1.ScheduleService",
        "tikk.v1.WorkerService", "tikk.v1.AdminService", "tikk.v1.BulkService",
    }  # fmt: skip
