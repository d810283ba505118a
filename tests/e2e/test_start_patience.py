"""A dispatcher started while ZooKeeper does not answer yet (a restart during an election)
waits for it instead of exiting; only when ``start_patience_ms`` is spent does it exit, with
the reason. A real ``tikk dispatcher`` process, the real ZooKeeper behind a relay that lets
nothing through until the test opens it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tests.e2e.conftest import Process
from tests.link_proxy import LinkProxy
from tests.services import ZOOKEEPER, require, with_login, zk_login
from tests.waiting import eventually

pytestmark = pytest.mark.e2e

_WAITING = re.compile(r"shard ownership did not open \(attempt 1\)")


@pytest.fixture
def closed_relay() -> Iterator[LinkProxy]:
    """A relay to the real ZooKeeper that drops every connection until ``restore()``."""
    relay = LinkProxy(require("zookeeper", ZOOKEEPER))
    relay.cut()
    yield relay
    relay.close()


def _dispatcher(relay: LinkProxy, chroot: str, data_dir: str, **env: str) -> Process:
    url = with_login(f"zk://{relay.address}/{chroot}")
    args = ["dispatcher", "--data-dir", data_dir, "--ownership", url, "--session-timeout", "2s"]
    return Process(args, {"PYTHONUNBUFFERED": "1", **env})


def _members(chroot: str) -> list[str]:
    client = KazooClient(hosts=ZOOKEEPER, **zk_login())
    client.start(timeout=10)
    try:
        path = f"/{chroot}/members"
        return list(client.get_children(path)) if client.exists(path) else []
    finally:
        client.stop()
        client.close()


def test_a_dispatcher_started_before_zookeeper_answers_joins_once_it_does(
    closed_relay: LinkProxy, tmp_path_factory: pytest.TempPathFactory
) -> None:
    chroot = f"tikk-patience-{uuid.uuid4().hex[:8]}"
    process = _dispatcher(closed_relay, chroot, str(tmp_path_factory.mktemp("data")))
    try:
        process.wait_for(_WAITING, timeout=30)
        assert _members(chroot) == []
        closed_relay.restore()
        eventually(lambda: len(_members(chroot)) == 1, timeout=30)
        assert process.proc.poll() is None, process.output()
    finally:
        code = process.stop()
    assert code == 0, process.output()
    assert "Traceback" not in process.output()


def test_a_dispatcher_whose_patience_is_spent_exits_with_the_reason(
    closed_relay: LinkProxy, tmp_path_factory: pytest.TempPathFactory
) -> None:
    chroot = f"tikk-patience-{uuid.uuid4().hex[:8]}"
    data_dir = str(tmp_path_factory.mktemp("data"))
    process = _dispatcher(closed_relay, chroot, data_dir, TIKK_SERVER_START_PATIENCE_MS="3000")
    try:
        assert process.proc.wait(timeout=60) == 1
    finally:
        process.stop()
    eventually(lambda: "tikk dispatcher: ZooKeeper" in process.output(), timeout=10)
    output = process.output()
    assert _WAITING.search(output), output
    assert "did not answer within 2.0s" in output
    assert "Traceback" not in output
    assert _members(chroot) == []
