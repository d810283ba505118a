"""Where the tests find the real Cassandra, Kafka and ZooKeeper (``tikk stack up``).

A test that needs a service it cannot reach fails under CI (``CI`` set to anything but empty,
``0`` or ``false``) and is skipped elsewhere, with the command that starts the stack.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import pytest

from devtools import stack

CASSANDRA = os.environ.get("TIKK_TEST_CASSANDRA", f"127.0.0.1:{stack.CQL_PORT}")
KAFKA = os.environ.get("TIKK_TEST_KAFKA", f"127.0.0.1:{stack.KAFKA_PORT}")
ZOOKEEPER = os.environ.get("TIKK_TEST_ZOOKEEPER", f"127.0.0.1:{stack.ZK_PORT}")


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
    message = f"{name} is not reachable at {address}; start it with `tikk stack up`"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def in_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the run is CI's: ``CI`` set to any value but empty, ``0`` or ``false``."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false")
