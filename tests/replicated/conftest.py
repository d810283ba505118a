"""The replicated stack for the tests of ``tests/replicated`` (``python -m devtools stack up
--nodes 3``: three Cassandra nodes, three Kafka brokers, three ZooKeeper servers on loopback
addresses of their own). A test that needs it and cannot reach it fails under CI and is
skipped elsewhere, with the command that starts it."""

from __future__ import annotations

import pytest

from devtools import stack
from tests.services import require

pytestmark = pytest.mark.e2e


def replicated(name: str) -> str:
    """``host:port,...`` of every node of service ``name``, once the first answers."""
    every = stack.addresses(name, stack.REPLICAS)
    require(f"the replicated {name} (--nodes 3)", every.split(",")[0])
    return every
