"""The stack's services as the suite sees them: do they answer, stopping and continuing
Kafka and Cassandra, and dropping what a run left in them.

A service is "stopped" with SIGSTOP of its JVM (``devtools.stack`` knows the pid): clients see
a peer that accepts connections and never answers, the nastier half of a crash. Before each
stop a detached guard process is started that sends SIGCONT once the stop has lasted its
planned time plus a margin, so the shared service comes back even if the suite itself is
killed; the suite continues the service itself on time and then kills its guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

from devtools import stack

log = logging.getLogger("devtools.faults")
GUARD_MARGIN_S = 20.0
_PROBE_TIMEOUT_S = 5.0


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _cql(address: str, connect_timeout: float) -> Any:
    """A bare driver cluster for ``address``, logging in as tikk on the authenticated stack."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster as CqlCluster

    from tikk.drivers.cassandra import CassandraConfig

    config = CassandraConfig.from_url(stack.login(f"cassandra://{address}/tikk"))
    login = config.credentials
    return CqlCluster(
        list(config.hosts), port=config.port, connect_timeout=connect_timeout,
        auth_provider=None if login is None else PlainTextAuthProvider(login.user, login.password),
        ssl_context=None if config.tls is None else config.tls.context("cassandra"),
    )  # fmt: skip


def _kafka_options(address: str) -> dict[str, Any]:
    """An aiokafka client's connection options for ``address`` (the stack's login, if any)."""
    from tikk.queue_contract import KafkaQueueUrl

    return KafkaQueueUrl.from_url(stack.login(f"kafka://{address}")).client_options()


def zookeeper_answers(address: str) -> bool:
    """ZooKeeper serves requests (``srvr`` reports a mode only then): one server of
    ``host:port[,host:port...]`` does."""
    return any(_zookeeper_server_answers(one) for one in address.split(","))


def _zookeeper_server_answers(address: str) -> bool:
    try:
        with socket.create_connection(_split(address), timeout=_PROBE_TIMEOUT_S) as sock:
            sock.settimeout(_PROBE_TIMEOUT_S)
            sock.sendall(b"srvr")
            return b"Mode:" in sock.recv(4096)
    except OSError:
        return False


def kafka_answers(address: str) -> bool:
    """The broker answers a metadata request (an accepted TCP connection proves nothing: the
    kernel accepts for a stopped process)."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def probe() -> None:
        admin = AIOKafkaAdminClient(
            **_kafka_options(address), request_timeout_ms=int(_PROBE_TIMEOUT_S * 1000)
        )
        try:
            await asyncio.wait_for(admin.start(), _PROBE_TIMEOUT_S)
            await asyncio.wait_for(admin.list_topics(), _PROBE_TIMEOUT_S)
        finally:
            with contextlib.suppress(Exception):
                await admin.close()

    try:
        asyncio.run(probe())
    except Exception:
        return False
    return True


def cassandra_answers(address: str) -> bool:
    """Cassandra answers a query."""
    cql = _cql(address, _PROBE_TIMEOUT_S)
    try:
        session = cql.connect()
        session.execute("SELECT release_version FROM system.local", timeout=_PROBE_TIMEOUT_S)
    except Exception:
        return False
    finally:
        cql.shutdown()
    return True


PROBES: dict[str, Callable[[str], bool]] = {
    "cassandra": cassandra_answers,
    "kafka": kafka_answers,
    "zookeeper": zookeeper_answers,
}


def wait_answering(name: str, address: str, timeout_s: float) -> float:
    """Wait until service ``name`` answers at ``address``; returns the seconds waited.
    Raises ``TimeoutError`` if it does not within ``timeout_s``."""
    began = time.monotonic()
    while not PROBES[name](address):
        if time.monotonic() - began > timeout_s:
            raise TimeoutError(f"{name} at {address} did not answer within {timeout_s:.0f} s")
        time.sleep(0.5)
    return time.monotonic() - began


class ServiceStopper:
    """Stops (SIGSTOP) and continues (SIGCONT) the JVM of a stack service, and always
    leaves every service it stopped running and answering."""

    def __init__(self, addresses: dict[str, str]) -> None:
        self._addresses = addresses
        # name → (pid, guard process)
        self._stopped: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}

    def stop(self, name: str, planned_s: float) -> int:
        """Stop service ``name`` (``kafka``, or one node of the replicated stack such as
        ``kafka-2``); returns its pid. A guard continues it after ``planned_s`` plus a
        margin whatever becomes of this process."""
        pid = self._service(name).pid()
        if pid is None:
            raise RuntimeError(f"{name} is not running under {stack.stack_dir()}")
        guard = subprocess.Popen(
            ["sh", "-c", f"sleep {planned_s + GUARD_MARGIN_S:.0f}; kill -CONT {pid}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._stopped[name] = (pid, guard)
        os.kill(pid, signal.SIGSTOP)
        return pid

    def resume(self, name: str, timeout_s: float = 180.0) -> None:
        """Continue service ``name`` and wait until it answers again."""
        pid, guard = self._stopped.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        guard.kill()
        guard.wait(5)
        node = self._service(name)
        address = self._addresses[name] if not node.index else _node_address(node)
        wait_answering(node.name, address, timeout_s)

    def restore(self) -> list[str]:
        """Continue every service still stopped and wait for each; returns their names.
        Called in a ``finally``: it must not stop half way."""
        restored = []
        for name in list(self._stopped):
            try:
                self.resume(name)
                restored.append(name)
            except Exception as exc:
                log.error("could not restore %s: %s", name, exc)
        return restored

    @staticmethod
    def _service(name: str) -> stack.Service:
        if name in ("kafka", "cassandra"):
            return stack.Service(name)
        node, _, index = name.rpartition("-")
        return stack.Service(node, int(index))


def _node_address(node: stack.Service) -> str:
    port = {"cassandra": stack.CQL_PORT, "kafka": stack.KAFKA_PORT, "zookeeper": stack.ZK_PORT}
    return f"{node.host}:{port[node.name]}"


def drop_cassandra_keyspace(address: str, keyspace: str) -> None:
    cql = _cql(address, 10)
    try:
        cql.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
    finally:
        cql.shutdown()


def delete_zookeeper_chroot(address: str, chroot: str) -> None:
    from kazoo.client import KazooClient

    from tikk.urls import BackendUrl

    login = BackendUrl.parse("ownership_url", stack.login(f"zk://{address}/tikk")).credentials
    auth = [] if login is None else [("digest", f"{login.user}:{login.password}")]
    zk = KazooClient(hosts=address, auth_data=auth)
    zk.start(timeout=10)
    try:
        zk.delete(chroot, recursive=True)
    finally:
        zk.stop()
        zk.close()


def delete_kafka_topics(address: str, topics: list[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    async def delete() -> None:
        admin = AIOKafkaAdminClient(**_kafka_options(address))
        await asyncio.wait_for(admin.start(), 10)
        try:
            present = set(await admin.list_topics())
            doomed = [t for t in topics if t in present]
            if doomed:
                await asyncio.wait_for(admin.delete_topics(doomed), 30)
        finally:
            await admin.close()

    asyncio.run(delete())


def best_effort(what: str, action: Callable[[], None]) -> None:
    """Run a clean-up step; a failure is logged, never raised."""
    try:
        action()
    except Exception as exc:
        log.warning("clean-up step %s failed: %s", what, exc)
