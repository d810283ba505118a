"""Secured backends on the authenticated stack (``python -m devtools stack up``, not
``--plain``): the right login works, and a wrong or missing password, or a certificate nobody
trusts, fails ``start()`` at once with ``BackendRefused`` naming the backend, host and user but
never the password; a ZooKeeper client without tikk's credentials cannot read tikk's nodes;
and the processes exit at start-up with that one line."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError
from kazoo.security import make_digest_acl

from devtools import stack
from dispatcher.ownership.zookeeper import ZkOwnership
from dispatcher.ready_queue.kafka import KafkaReadyQueue
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, require, with_login
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.errors import BackendRefused, InvalidArgument
from worker_sdk.queues import open_consumer

ROOT = Path(__file__).resolve().parents[2]
WRONG = "not-the-password"


@pytest.fixture(autouse=True)
def authenticated() -> None:
    if stack.variant() != stack.AUTH:
        pytest.skip("the stack runs without authentication (python -m devtools stack up --plain)")


@pytest.fixture
def wrong_password(tmp_path: Path) -> str:
    path = tmp_path / "wrong.password"
    path.write_text(WRONG + "\n")
    return str(path)


def _with_password_file(url: str, path: str) -> str:
    """``url`` (logged in as the stack's user) with another password file."""
    service = {"cassandra": "cassandra", "kafka": "kafka", "zk": "zookeeper"}[
        url.split(":", maxsplit=1)[0]
    ]
    return url.replace(str(stack.secret_file(service)), path)


def _without_ca(url: str) -> str:
    """``url`` with TLS on but the stack's CA not trusted (the system's CAs only)."""
    return url.replace(f"tls_ca={stack.tls_ca()}", "tls=1")


def _secret(service: str) -> str:
    return stack.secret_file(service).read_text().strip()


def _assert_refused(error: BackendRefused, backend: str, user: str) -> None:
    text = str(error)
    assert text.startswith(f"{backend} at 127.0.0.1:"), text
    assert (f"user {user!r}" if user else "no user") in text
    # Computed first, so that a failure does not print the stack's passwords.
    leaked = [n for n in ("cassandra", "kafka", "zookeeper") if _secret(n) in text]
    assert not leaked, f"the {leaked} password is in the message"
    assert WRONG not in text


# -- Cassandra --------------------------------------------------------------------------------


def _cassandra(keyspace_url: str) -> CassandraSession:
    return CassandraSession(CassandraConfig.from_url(keyspace_url))


def _cassandra_url() -> str:
    return with_login(f"cassandra://{require('cassandra', CASSANDRA)}/tikk_login")


async def test_cassandra_logs_in_with_the_right_password() -> None:
    session = _cassandra(_cassandra_url())
    await session.start()
    try:
        assert session.session is not None
    finally:
        await session.close()


async def test_cassandra_refuses_a_wrong_password_at_start(wrong_password: str) -> None:
    session = _cassandra(_with_password_file(_cassandra_url(), wrong_password))
    with pytest.raises(BackendRefused) as caught:
        await session.start()
    _assert_refused(caught.value, "cassandra", stack.USER)
    assert "wrong user or password" in str(caught.value)


async def test_cassandra_without_a_login_is_refused_at_start() -> None:
    bare = f"cassandra://{CASSANDRA}/tikk_login?tls_ca={stack.tls_ca()}"
    with pytest.raises(BackendRefused) as caught:
        await _cassandra(bare).start()
    _assert_refused(caught.value, "cassandra", "")
    assert "requires a login" in str(caught.value)


def test_a_user_without_a_password_is_a_clear_setting_error() -> None:
    url = _cassandra_url().replace(f"password_file={stack.secret_file('cassandra')}&", "")
    with pytest.raises(InvalidArgument, match="has no password"):
        CassandraConfig.from_url(url)


async def test_cassandra_with_an_untrusted_certificate_is_refused_at_start() -> None:
    with pytest.raises(BackendRefused) as caught:
        await _cassandra(_without_ca(_cassandra_url())).start()
    _assert_refused(caught.value, "cassandra", stack.USER)
    assert "not trusted" in str(caught.value)


# -- Kafka ------------------------------------------------------------------------------------


def _kafka_url() -> str:
    return with_login(f"kafka://{require('kafka', KAFKA)}?prefix=login{uuid.uuid4().hex[:6]}.")


async def test_kafka_producer_and_consumer_log_in_with_the_right_password() -> None:
    url = _kafka_url()
    queue = KafkaReadyQueue.from_url(url)
    await queue.start()
    try:
        await queue.prepare(["q"])
    finally:
        await queue.close()
    consumer = open_consumer(url, ["q"], 30_000)
    await consumer.start()
    await consumer.close()


async def test_kafka_refuses_a_wrong_password_at_start_on_both_sides(wrong_password: str) -> None:
    url = _with_password_file(_kafka_url(), wrong_password)
    queue = KafkaReadyQueue.from_url(url)
    with pytest.raises(BackendRefused) as caught:
        await queue.start()
    await queue.close()
    _assert_refused(caught.value, "kafka", stack.USER)
    consumer = open_consumer(url, ["q"], 30_000)
    with pytest.raises(BackendRefused) as caught:
        await consumer.start()
    await consumer.close()
    _assert_refused(caught.value, "kafka", stack.USER)


async def test_kafka_with_an_untrusted_certificate_is_refused_at_start() -> None:
    queue = KafkaReadyQueue.from_url(_without_ca(_kafka_url()))
    with pytest.raises(BackendRefused) as caught:
        await queue.start()
    await queue.close()
    _assert_refused(caught.value, "kafka", stack.USER)
    assert "not trusted" in str(caught.value)


# Event loops closed the moment their check returns: before the check waited for its TLS
# connection to close (refused or not), the garbage collector found it still open, which a
# warning-strict test then tripped on.
_LOGIN_CHECKS = """
import asyncio, gc, sys
from tikk.drivers.kafka import check_login
from tikk.errors import BackendRefused
from tikk.queue_contract import KafkaQueueUrl

for _ in range(10):
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(check_login(KafkaQueueUrl.from_url(sys.argv[1])))
        print("in")
    except BackendRefused:
        print("refused")
    loop.close()
    gc.collect()
"""


@pytest.mark.parametrize("login", ["right", "wrong"])
def test_a_login_check_leaves_no_connection_open_when_its_loop_ends(
    login: str, wrong_password: str
) -> None:
    """A process (or a test) may end its event loop right after checking its login; over TLS
    closing the connection needs the loop, so the check waits for it, refused or not."""
    url = _kafka_url() if login == "right" else _with_password_file(_kafka_url(), wrong_password)
    run = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", _LOGIN_CHECKS, url],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["in" if login == "right" else "refused"] * 10
    assert "unclosed" not in run.stderr


# The same for the clients. aiokafka closes some connections without waiting for them (the one
# each client bootstraps from, among others), so a loop that ended right after close() found one
# still open whenever the broker's end of its TLS close came later than that: now and then on a
# local stack, always with a broker farther away. The queue's and the consumer's clients
# bootstrap through a proxy that makes the broker that far.
_START_CLOSE = """
import asyncio, gc, sys
from dispatcher.ready_queue.kafka import KafkaReadyQueue
from worker_sdk.queues import open_consumer

async def start_close(url):
    queue = KafkaReadyQueue.from_url(url)
    await queue.start()
    try:
        await queue.prepare(["q"])
    finally:
        await queue.close()
    consumer = open_consumer(url, ["q"], 30_000)
    await consumer.start()
    await consumer.close()
    print("closed")

for _ in range(3):
    loop = asyncio.new_event_loop()
    loop.run_until_complete(start_close(sys.argv[1]))
    loop.close()
    gc.collect()
"""
# How much later the proxy passes on what the broker sends.
_FAR_S = 0.05


async def test_the_kafka_clients_leave_no_connection_open_when_their_loop_ends() -> None:
    """``close()`` of the ready queue and of the consumer returns once every connection their
    clients opened has released its socket, so a loop may end right after it."""
    async with _far_kafka() as address:
        url = with_login(f"kafka://{address}?prefix=login{uuid.uuid4().hex[:6]}.")
        run = await asyncio.create_subprocess_exec(
            sys.executable, "-W", "always::ResourceWarning", "-c", _START_CLOSE, url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        async with asyncio.timeout(100):
            out, err = await run.communicate()
    assert run.returncode == 0, err.decode()
    assert out.decode().split() == ["closed"] * 3
    assert "unclosed" not in err.decode()


@contextlib.asynccontextmanager
async def _far_kafka() -> AsyncIterator[str]:
    """The address of a proxy to the stack's Kafka that passes on what the broker sends
    ``_FAR_S`` late. Only the connections to the URL's address go through it: the others go
    where the broker's metadata says, to the broker itself."""
    host, _, port = require("kafka", KAFKA).rpartition(":")
    served: set[asyncio.Task[Any]] = set()

    async def serve(client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        served.add(asyncio.current_task())  # type: ignore[arg-type]
        broker_in, broker_out = await asyncio.open_connection(host, int(port))
        await asyncio.gather(_pass(client_in, broker_out, 0), _pass(broker_in, client_out, _FAR_S))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()
        await asyncio.gather(*served, return_exceptions=True)


async def _pass(source: asyncio.StreamReader, to: asyncio.StreamWriter, delay: float) -> None:
    """Pass on what comes from ``source`` ``delay`` late, until it ends; then close ``to``."""
    try:
        while data := await source.read(1 << 16):
            await asyncio.sleep(delay)
            to.write(data)
            await to.drain()
    except OSError:
        pass  # the other end is gone: nothing left to pass on
    finally:
        to.close()
        with contextlib.suppress(OSError):
            await to.wait_closed()


def test_a_kafka_user_without_a_password_is_a_clear_setting_error() -> None:
    url = _kafka_url().replace(f"password_file={stack.secret_file('kafka')}", "x=1")
    with pytest.raises(InvalidArgument, match="has no password"):
        KafkaReadyQueue.from_url(url)


# -- ZooKeeper --------------------------------------------------------------------------------


@pytest.fixture
def chroot() -> Iterator[str]:
    path = f"/tikk-login-{uuid.uuid4().hex[:8]}"
    yield path
    client = KazooClient(hosts=ZOOKEEPER, auth_data=_digest(stack.USER, _zk_password()))
    client.start(10)
    try:
        client.delete(path, recursive=True)
    finally:
        client.stop()
        client.close()


def _zk_password() -> str:
    return stack.secret_file("zookeeper").read_text().strip()


def _digest(user: str, password: str) -> list[tuple[str, str]]:
    return [("digest", f"{user}:{password}")]


def _make_chroot(chroot: str) -> None:
    client = KazooClient(hosts=ZOOKEEPER, auth_data=_digest(stack.USER, _zk_password()))
    client.start(10)
    try:
        client.ensure_path(chroot, acl=[make_digest_acl(stack.USER, _zk_password(), all=True)])
    finally:
        client.stop()
        client.close()


def _zk_url(chroot: str) -> str:
    return with_login(f"zk://{require('zookeeper', ZOOKEEPER)}{chroot}")


async def test_zookeeper_nodes_are_tikks_alone(chroot: str) -> None:
    owner = ZkOwnership.from_url(_zk_url(chroot), 4, session_timeout_s=5)
    await owner.start()
    try:
        # Another identity (any digest login is accepted; the ACL decides) may not read them.
        other = KazooClient(hosts=ZOOKEEPER, auth_data=_digest("mallory", WRONG))
        other.start(10)
        try:
            with pytest.raises(NoAuthError):
                other.get_children(chroot)
            with pytest.raises(NoAuthError):
                other.create(f"{chroot}/intruder", ephemeral=True)
        finally:
            other.stop()
            other.close()
        # A client with no credentials at all is turned away by the server.
        anonymous = KazooClient(hosts=ZOOKEEPER)
        anonymous.start(10)
        try:
            with pytest.raises(SessionClosedRequireSaslError):
                anonymous.get_children(chroot)
        finally:
            anonymous.stop()
            anonymous.close()
    finally:
        await owner.close()


async def test_zookeeper_refuses_a_wrong_password_at_start(
    chroot: str, wrong_password: str
) -> None:
    _make_chroot(chroot)
    wrong = ZkOwnership.from_url(
        _with_password_file(_zk_url(chroot), wrong_password), 4, session_timeout_s=5
    )
    with pytest.raises(BackendRefused) as caught:
        await wrong.start()
    _assert_refused(caught.value, "zookeeper", stack.USER)
    assert "wrong user or password" in str(caught.value)


async def test_zookeeper_without_a_login_is_refused_at_start(chroot: str) -> None:
    anonymous = ZkOwnership.from_url(f"zk://{ZOOKEEPER}{chroot}", 4, session_timeout_s=5)
    with pytest.raises(BackendRefused) as caught:
        await anonymous.start()
    _assert_refused(caught.value, "zookeeper", "")


# -- the processes ----------------------------------------------------------------------------


def _tikk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("service", ["cassandra", "kafka", "zookeeper"])
def test_a_process_with_a_wrong_password_exits_at_start_with_one_clear_line(
    service: str, wrong_password: str, tmp_path: Path, chroot: str
) -> None:
    store = with_login(f"cassandra://{CASSANDRA}/tikk_login")
    queue = with_login(f"kafka://{KAFKA}?prefix=loginproc.")
    ownership = _zk_url(chroot)
    if service == "cassandra":
        store = _with_password_file(store, wrong_password)
    elif service == "kafka":
        queue = _with_password_file(queue, wrong_password)
    else:
        _make_chroot(chroot)  # with tikk's ACL, as a dispatcher that ran before left it
        ownership = _with_password_file(ownership, wrong_password)
    if service != "cassandra":
        assert _tikk("migrate", "--store", store, "--history", store).returncode == 0
    done = _tikk(
        "dispatcher", "--store", store, "--history", store, "--queue", queue,
        "--ownership", ownership, "--data-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"tikk dispatcher: {service} at 127.0.0.1:"), done.stderr
    assert f"refused user '{stack.USER}'" in line
    assert WRONG not in done.stdout + done.stderr


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
async def test_kafka_without_a_login_is_refused_at_start(tls: bool) -> None:
    url = f"kafka://{require('kafka', KAFKA)}?prefix=nologin."
    queue = KafkaReadyQueue.from_url(url + (f"&tls_ca={stack.tls_ca()}" if tls else ""))
    with pytest.raises(BackendRefused) as caught:
        await queue.start()
    await queue.close()
    _assert_refused(caught.value, "kafka", "")
    assert "requires a login" in str(caught.value)


def test_a_server_with_a_wrong_queue_password_exits_at_start(
    wrong_password: str, tmp_path: Path
) -> None:
    queue = _with_password_file(with_login(f"kafka://{KAFKA}?prefix=loginsrv."), wrong_password)
    done = _tikk(
        "server", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--queue", queue
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("tikk server: kafka at 127.0.0.1:"), done.stderr
    assert "listening on" not in done.stdout
