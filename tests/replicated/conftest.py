"""The replicated stack for the tests of ``tests/replicated``: three Cassandra nodes, three
Kafka brokers and three ZooKeeper servers on loopback addresses of their own
(``python -m devtools stack up --nodes 3``).

The first test that needs it starts it, in the variant the one-node stack runs in, unless it
runs already, and the session stops it again after the last test (only if it started it): the
nine JVMs take about 4 GB and a minute to start, so they run only while these tests do. A
machine that cannot start it (no JDK 17 or Maven) fails the tests under CI and skips them
elsewhere, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools import stack, stack_launch
from tests.services import in_ci


@pytest.fixture(scope="session", autouse=True)
def replicated_stack() -> Iterator[None]:
    running = {
        n.label
        for name in stack.SERVICE_NAMES
        for n in stack.nodes(name, stack.REPLICAS)
        if n.pid() is not None
    }
    try:
        stack_launch.up(count=stack.REPLICAS, plain=stack.variant() == stack.PLAIN)
    except stack.StackError as exc:
        if in_ci():
            pytest.fail(f"the replicated stack did not start: {exc}")
        pytest.skip(f"the replicated stack did not start: {exc}")
    yield
    if not running:
        stack_launch.down(stack.REPLICAS)


def replicated(name: str) -> str:
    """``host:port,...`` of every node of service ``name``."""
    return stack.addresses(name, stack.REPLICAS)
