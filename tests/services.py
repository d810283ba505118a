"""Where the tests find the real Cassandra, Kafka and ZooKeeper (``python -m devtools stack up``).

A test that needs a service it cannot reach fails under CI (``CI`` set to anything but empty,
``0`` or ``false``) and is skipped elsewhere, with the command that starts the stack.

The stack is authenticated unless it was started with ``--plain``: a test builds its URL from
the address here and passes it through ``with_login`` (``cassandra://``, ``kafka://``,
``zk://``), which adds the stack's user, password file and CA; ``KAFKA_OPTIONS`` are the same
for a Kafka client made by hand. Both follow ``$TIKK_STACK_DIR`` and the port variables.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

import pytest

from devtools import stack

CASSANDRA = os.environ.get("TIKK_TEST_CASSANDRA", f"127.0.0.1:{stack.CQL_PORT}")
KAFKA = os.environ.get("TIKK_TEST_KAFKA", f"127.0.0.1:{stack.KAFKA_PORT}")
ZOOKEEPER = os.environ.get("TIKK_TEST_ZOOKEEPER", f"127.0.0.1:{stack.ZK_PORT}")


def with_login(url: str) -> str:
    """``url`` with the stack's login added (unchanged on the open variant)."""
    return stack.login(url)


def kafka_options(address: str = KAFKA) -> dict[str, Any]:
    """Keyword arguments of an aiokafka client (admin, consumer) connecting to ``address`` as
    tikk does: with the stack's login and TLS when it is authenticated."""
    from tikk.queue_contract import KafkaQueueUrl

    return KafkaQueueUrl.from_url(with_login(f"kafka://{address}")).client_options()


def zk_login() -> dict[str, Any]:
    """Keyword arguments of a ``KazooClient`` that logs in as tikk (none on the open stack)."""
    from tikk.urls import BackendUrl

    login = BackendUrl.parse("ownership_url", with_login(f"zk://{ZOOKEEPER}/tikk")).credentials
    if login is None:
        return {}
    return {"auth_data": [("digest", f"{login.user}:{login.password}")]}


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return False
    return True


def require(name: str, address: str) -> str:
    """``address`` if the service answers there; otherwise fail in CI, skip elsewhere."""
    if _reachable(address):
        return address
    message = f"{name} is not reachable at {address}; start it with `python -m devtools stack up`"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def in_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the run is CI's: ``CI`` set to any value but empty, ``0`` or ``false``."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false")
