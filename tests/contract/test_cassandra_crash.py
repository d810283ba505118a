"""The stack's Cassandra node killed with ``-9`` comes back whole: the keyspace made just
before, its tables and every row older than the commit log's sync period, read through that
node, which then takes writes again.

Cassandra started with ``-Dcassandra.test.flush_local_schema_changes=false`` or
``-Dcassandra.unsafesystem=true`` (the stack once set both, for speed) came back without the
keyspace, and every write to it then failed. The test kills the node the tests share and
starts it again (about 15 s), so it runs only against the JVM of ``devtools.stack``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from devtools import stack, stack_launch
from tests.contract import cassandra_keyspace
from tests.services import CASSANDRA, require, with_login
from tikk.drivers.cassandra import CassandraConfig

pytestmark = pytest.mark.timeout(300)
# infra/cassandra/cassandra.yaml's commitlog_sync_period.
_SYNC_S = 1.0


def _session(address: str) -> Any:
    """A bare driver session on ``address`` alone, logged in as tikk (the stack's login)."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    config = CassandraConfig.from_url(with_login(f"cassandra://{address}/system"))
    login = config.credentials
    cluster = Cluster(
        list(config.hosts),
        port=config.port,
        protocol_version=5,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=WhiteListRoundRobinPolicy(list(config.hosts))
            )
        },
        auth_provider=None if login is None else PlainTextAuthProvider(login.user, login.password),
        ssl_context=None if config.tls is None else config.tls.context("cassandra"),
    )
    return cluster.connect()


def test_a_node_killed_with_minus_9_comes_back_with_its_keyspaces_and_rows(
    keyspace: cassandra_keyspace.TestKeyspace,
) -> None:
    address = require("cassandra", CASSANDRA)
    if address != f"127.0.0.1:{stack.CQL_PORT}" or stack.CASSANDRA.pid() is None:
        pytest.skip("the tests' Cassandra is not the stack's JVM: nothing of ours to kill")
    crashed = f"crash_{uuid.uuid4().hex[:12]}"
    session = _session(address)
    try:
        session.execute(
            f"CREATE KEYSPACE {crashed} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        session.execute(f"CREATE TABLE {crashed}.t (k int PRIMARY KEY, v text)")
        for k in range(50):
            session.execute(f"INSERT INTO {crashed}.t (k, v) VALUES (%s, 'x')", (k,))
    finally:
        session.cluster.shutdown()
    time.sleep(_SYNC_S + 0.5)  # the writes of the last second may be lost (not synced yet)
    stack.CASSANDRA.kill()
    stack_launch.up(["cassandra"], count=1, plain=stack.variant() == stack.PLAIN)
    keyspace.reconnect()  # the other tests' session saw the node die
    again = _session(address)
    try:
        rows = again.execute(f"SELECT count(*) FROM {crashed}.t").one()[0]
        again.execute(f"INSERT INTO {crashed}.t (k, v) VALUES (99, 'after')")
        again.execute(f"DROP KEYSPACE {crashed}")
    finally:
        again.cluster.shutdown()
    assert rows == 50
