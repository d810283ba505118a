"""Credentials over their life, against real ``tikk server --auth`` processes: a revocation
made with ``tikk auth revoke`` applies on every server of the store within seconds; a rotated
token replaces the old one; and nothing secret reaches a server's log or an error message."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from server.certs import DevPki
from tests.contract.cassandra_keyspace import REPLICATION
from tests.e2e.auth_stack import LISTENING, AuthStack, Token, bearer, code_of, tikk
from tests.e2e.conftest import Process
from tests.services import CASSANDRA, require, with_login
from tests.waiting import eventually
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.drivers.cassandra_schema import run_migrations
from tikk.store.cassandra.schema import STORE_MIGRATIONS
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

pytestmark = pytest.mark.e2e

NS = "team-a"
# Every server reloads its view at least every 5 s (server.auth.authenticator); the wait
# allows for slow machines.
REVOCATION_BOUND_S = 20.0


def _get_task(address: str, token: str) -> grpc.StatusCode:
    """The status of a GetTask with ``token`` on a fresh channel (NOT_FOUND: admitted)."""
    with grpc.insecure_channel(address) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)
        try:
            stub.GetTask(tasks_pb2.GetTaskRequest(namespace=NS, task_id="x"), timeout=15,
                         metadata=bearer(token))  # fmt: skip
        except grpc.RpcError as exc:
            return code_of(exc)
    return grpc.StatusCode.OK


@pytest.fixture
def sqlite_stack(tmp_path: Path) -> Iterator[AuthStack]:
    stack = AuthStack(tmp_path)
    yield stack
    stack.close()


@pytest.fixture
def cassandra_stack(tmp_path: Path) -> Iterator[AuthStack]:
    """Servers on a keyspace of their own, migrated by ``tikk migrate``."""
    keyspace = f"tikk_auth_{int(time.time() * 1000) % 10**9}"
    url = with_login(f"cassandra://{require('cassandra', CASSANDRA)}/{keyspace}")
    stack = AuthStack(tmp_path, store=url)
    done = tikk("migrate", *stack.backend_args(), "--shards", "16", "--replication", REPLICATION)
    assert done.returncode == 0, done.stdout + done.stderr
    yield stack
    stack.close()
    session = CassandraSession(CassandraConfig.from_url(url))
    session.connect()
    session.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    session.shutdown()


def _revoked_everywhere(stack: AuthStack) -> None:
    credential_id, token = stack.create("ci", f"read:{NS}")
    addresses = [stack.start_server(), stack.start_server()]
    for address in addresses:
        assert _get_task(address, token) == grpc.StatusCode.NOT_FOUND  # admitted
    stack.revoke(credential_id)
    revoked_at = time.monotonic()

    def refused_by_all() -> bool:
        return all(_get_task(a, token) == grpc.StatusCode.UNAUTHENTICATED for a in addresses)

    eventually(refused_by_all, timeout=REVOCATION_BOUND_S, every=0.2)
    elapsed = time.monotonic() - revoked_at
    print(f"revocation refused on both servers after {elapsed:.1f} s")


def test_a_revocation_applies_on_every_server_process(sqlite_stack: AuthStack) -> None:
    _revoked_everywhere(sqlite_stack)


def test_a_revocation_applies_on_every_server_process_on_cassandra(
    cassandra_stack: AuthStack,
) -> None:
    _revoked_everywhere(cassandra_stack)


def test_a_rotated_token_replaces_the_old_one(sqlite_stack: AuthStack) -> None:
    credential_id, old = sqlite_stack.create("ci", f"read:{NS}")
    address = sqlite_stack.start_server()
    assert _get_task(address, old) == grpc.StatusCode.NOT_FOUND
    token_file = sqlite_stack.data_dir / "rotated.token"
    done = tikk("auth", "rotate", credential_id, "--token-file", str(token_file),
                *sqlite_stack.backend_args())  # fmt: skip
    assert done.returncode == 0, done.stderr
    new = Token(token_file.read_text().strip())
    assert token_file.stat().st_mode & 0o777 == 0o600
    eventually(lambda: _get_task(address, old) == grpc.StatusCode.UNAUTHENTICATED, timeout=20)
    assert _get_task(address, new) == grpc.StatusCode.NOT_FOUND


def _refused_calls(calls: list[tuple[str, Callable[[], object]]]) -> list[str]:
    """The error details of each call, which must each be refused."""
    details = []
    for name, call in calls:
        with pytest.raises(grpc.RpcError) as refused:
            call()
        assert code_of(refused.value) in (
            grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
        ), name  # fmt: skip
        details.append(refused.value.details() or "")
    return details


def test_no_token_or_hash_reaches_the_log_or_the_caller(sqlite_stack: AuthStack) -> None:
    _, reader = sqlite_stack.create("reader", f"read:{NS}")
    revoked_id, revoked = sqlite_stack.create("revoked", "admin:*")
    sqlite_stack.revoke(revoked_id)
    address = sqlite_stack.start_server(env={"TIKK_LOG_LEVEL": "DEBUG"})
    wrong = Token(reader[: -len("wrong")] + "wrong")
    with grpc.insecure_channel(address) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)
        create = tasks_pb2.CreateTaskRequest(namespace=NS, queue="q", handler="h",
                                             payload=b"payload-must-not-leak")  # fmt: skip
        details = _refused_calls([
            ("wrong secret", lambda: stub.CreateTask(create, timeout=15, metadata=bearer(wrong))),
            ("revoked", lambda: stub.CreateTask(create, timeout=15, metadata=bearer(revoked))),
            ("no write role", lambda: stub.CreateTask(create, timeout=15,
                                                      metadata=bearer(reader))),
            ("no role in stream", lambda: stub.CreateTasks(
                iter([tasks_pb2.CreateTasksRequest(tasks=[create])]), timeout=15,
                metadata=bearer(reader))),
        ])  # fmt: skip
    server = sqlite_stack.servers[0]
    server.stop()
    log = "\n".join(server.lines)
    assert "refused /tikk.v1.TaskService/CreateTask" in log  # the refusals were logged
    secrets = [reader, wrong, revoked, _secret_part(reader), _secret_part(revoked)]
    secrets += _stored_hashes(sqlite_stack)
    for where, text in [("server log", log), *(("error details", d) for d in details)]:
        # Positions only: a failure must not print what leaked.
        leaked = [i for i, secret in enumerate(secrets) if secret in text]
        assert not leaked, f"secrets #{leaked} appear in the {where}"
        assert "payload-must-not-leak" not in text


def _secret_part(token: str) -> str:
    return token.split("_", 2)[2]  # tikk_<id>_<secret>; the secret may hold "_" itself


def _stored_hashes(stack: AuthStack) -> list[str]:
    """Every salt and hash in the store, as hex and as the bytes' repr."""
    import asyncio

    from tikk.store.sqlite.credentials import SqliteCredentialStore

    async def read() -> list[str]:
        store = SqliteCredentialStore(str(stack.data_dir / "tikk.db"))
        await store.start()
        try:
            found = await store.list_all()
        finally:
            await store.close()
        return [v for c in found for b in (c.salt, c.secret_hash) for v in (b.hex(), repr(b))]

    return asyncio.run(read())


def test_the_cli_lists_no_secret_and_refuses_clearly(sqlite_stack: AuthStack) -> None:
    credential_id, token = sqlite_stack.create("ci", f"read:{NS}", "worker:emails")
    sqlite_stack.revoke(credential_id)
    args = sqlite_stack.backend_args()
    listed = tikk("auth", "list", "--all", "--json", *args)
    assert listed.returncode == 0, listed.stderr
    assert '"grants": [\n      "read:team-a",\n      "worker:emails"\n    ]' in listed.stdout
    assert '"revoked": ""' not in listed.stdout
    hidden = [token, _secret_part(token), *_stored_hashes(sqlite_stack)]
    assert not [i for i, s in enumerate(hidden) if s in listed.stdout + listed.stderr]
    assert tikk("auth", "list", *args).stdout.strip() == "(none)"  # revoked ones need --all
    unknown = tikk("auth", "revoke", "0" * 32, *args)
    assert unknown.returncode == 1 and "not found" in unknown.stderr
    revived = tikk("auth", "rotate", credential_id, *args)
    assert revived.returncode == 1 and "revoked" in revived.stderr
    assert "tikk_" not in revived.stdout  # no token was made for it
    bad_role = tikk("auth", "create", "--name", "x", "--role", "owner:a", *args)
    assert bad_role.returncode == 2 and "role must be one of" in bad_role.stderr


def test_a_keyspace_without_the_credentials_table_is_refused_at_start(tmp_path: Path) -> None:
    """A keyspace migrated by a release before credentials: the server says to migrate
    instead of refusing every call."""
    keyspace = f"tikk_auth_old_{int(time.time() * 1000) % 10**9}"
    url = with_login(f"cassandra://{require('cassandra', CASSANDRA)}/{keyspace}")
    session = CassandraSession(CassandraConfig.from_url(url))
    session.connect()
    try:
        before_credentials = [m for m in STORE_MIGRATIONS if m.version < 7]
        run_migrations(session, before_credentials, REPLICATION)
        server = Process(["server", "--data-dir", str(tmp_path), "--store", url,
                          "--listen", "127.0.0.1:0", "--shards", "16", "--auth"], {})  # fmt: skip
        assert server.proc.wait(120) == 1
        eventually(lambda: "run `tikk migrate`" in server.output(), timeout=10)  # output read
    finally:
        session.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
        session.shutdown()


def test_tasks_run_end_to_end_with_authentication_on(sqlite_stack: AuthStack) -> None:
    """``tikk dev --auth`` over TLS: the CLI creates with a writer's token file, and a worker
    process with a worker token for its queue fetches its configuration and reports the run."""
    stack = sqlite_stack
    _, writer = stack.create("ops", f"write:{NS}")
    stack.create("runner", "worker:e2e")
    files = {name: stack.data_dir / f"{name}.token" for name in ("ops", "runner")}
    ca = str(stack.pki().ca_cert)
    env = {"TIKK_E2E_LOG": str(stack.data_dir / "runs.jsonl"), "PYTHONUNBUFFERED": "1"}
    dev = Process(["dev", *stack.backend_args(), "--listen", "127.0.0.1:0", "--shards", "16",
                   "--auth", *stack.tls_args()], env)  # fmt: skip
    stack.servers.append(dev)
    address = f"127.0.0.1:{dev.wait_for(LISTENING).group(1)}"
    over_tls = ["--server", address, "--tls-ca", ca]
    worker = Process(["worker", "tests.e2e.worker_app:worker", *over_tls,
                      "--token-file", str(files["runner"])], env)  # fmt: skip
    stack.servers.append(worker)
    made = tikk("task", "create", "--namespace", NS, "--queue", "e2e", "--handler", "record",
                "--id", "t-auth", *over_tls, "--token-file", str(files["ops"]))  # fmt: skip
    assert made.returncode == 0, made.stderr
    with stack.channel(address) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)

        def state() -> int:
            req = tasks_pb2.GetTaskRequest(namespace=NS, task_id="t-auth")
            task = stub.GetTask(req, timeout=15, metadata=bearer(writer))
            return int(task.state)

        eventually(lambda: state() == tasks_pb2.TASK_STATE_SUCCEEDED, timeout=60)


def test_an_in_process_worker_authenticates_by_the_dev_client_certificate(
    sqlite_stack: AuthStack,
) -> None:
    """``tikk dev --tls --tls-client-ca ... --auth --worker``: the in-process worker presents
    the development client certificate, whose common name a worker credential names."""
    stack = sqlite_stack
    _, writer = stack.create("ops", f"write:{NS}")
    stack.create("dev-worker", "worker:*", subject="tikk-dev-client")
    env = {"TIKK_E2E_LOG": str(stack.data_dir / "runs.jsonl"), "PYTHONUNBUFFERED": "1"}
    dev = Process(["dev", *stack.backend_args(), "--listen", "127.0.0.1:0", "--shards", "16",
                   "--auth", "--tls", "--tls-client-ca", str(stack.data_dir / "tls" / "ca.pem"),
                   "--worker", "tests.e2e.worker_app:worker"], env)  # fmt: skip
    stack.servers.append(dev)
    address = f"127.0.0.1:{dev.wait_for(LISTENING).group(1)}"
    pki = DevPki.in_directory(stack.data_dir / "tls")
    credentials = grpc.ssl_channel_credentials(
        pki.ca_cert.read_bytes(), pki.client_key.read_bytes(), pki.client_cert.read_bytes()
    )
    with grpc.secure_channel(address, credentials) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)
        create = tasks_pb2.CreateTaskRequest(namespace=NS, task_id="t-dev", queue="e2e",
                                             handler="record")  # fmt: skip
        stub.CreateTask(create, timeout=15, metadata=bearer(writer))
        get = tasks_pb2.GetTaskRequest(namespace=NS, task_id="t-dev")

        def succeeded() -> bool:
            task = stub.GetTask(get, timeout=15, metadata=bearer(writer))
            return bool(task.state == tasks_pb2.TASK_STATE_SUCCEEDED)

        eventually(succeeded, timeout=60)
