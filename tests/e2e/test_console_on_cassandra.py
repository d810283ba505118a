"""The console of a server on the production stack, where one history read passes over a
bounded number of runs: a run search for a status that is rare among the newest runs still
finds the older ones, instead of showing an empty page."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from history.cassandra import CassandraRunHistory
from tests.e2e.conftest import Process
from tests.factories import make_run
from tests.services import CASSANDRA, KAFKA, ZOOKEEPER, require, with_login
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.model import RunStatus

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
_CONSOLE = re.compile(r"console (http://[\d.]+:\d+/console/)")
# More than one history read passes over (READS_PER_CALL pages of the console's 50).
NEWER_FAILURES = 2_500


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    for name, address in (("cassandra", CASSANDRA), ("kafka", KAFKA), ("zookeeper", ZOOKEEPER)):
        require(name, address)
    tag = uuid.uuid4().hex[:8]
    cql = with_login(f"cassandra://{CASSANDRA}/tikk_e2e_{tag}")
    backend = [
        "--store", cql, "--history", cql,
        "--queue", with_login(f"kafka://{KAFKA}?prefix=e2e{tag}.&partitions=2"),
        "--ownership", with_login(f"zk://{ZOOKEEPER}/tikk-e2e-{tag}"),
    ]  # fmt: skip
    env = {"TIKK_DELIVERY_KEYS": str(tmp_path_factory.mktemp("keys") / "keys")}
    migrate = Process(["migrate", *backend], env)
    assert migrate.proc.wait(120) == 0, migrate.output()
    asyncio.run(_fill_history(cql))
    server = Process(["server", *backend, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"],
                     env)  # fmt: skip
    try:
        yield server.wait_for(_CONSOLE, timeout=60).group(1)
    finally:
        server.stop()


async def _fill_history(url: str) -> None:
    """Three succeeded runs, then many dead-lettered ones recorded after them."""
    now = int(time.time() * 1000)
    old = [make_run(f"ok-{i}", task_id=f"ok-{i}", finished_ms=now - 600_000 + i)
           for i in range(3)]  # fmt: skip
    newer = [
        make_run(f"dl-{i:04}", task_id=f"dl-{i:04}", finished_ms=now - 300_000 + i,
                 status=RunStatus.DEAD_LETTERED)
        for i in range(NEWER_FAILURES)
    ]  # fmt: skip
    history = CassandraRunHistory(CassandraSession(CassandraConfig.from_url(url)))
    await history.start()
    try:
        for first in range(0, len(newer), 500):
            await history.append_many(newer[first : first + 500])
        await history.append_many(old)
    finally:
        await history.close()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def test_a_status_rare_among_the_newest_runs_is_still_found(console: str) -> None:
    page = _get(console + "ns/default/runs?queue=q&status=succeeded&hours=24")
    shown = re.findall(r'<a href="/console/ns/default/tasks/(ok-\d)">', page)
    assert sorted(shown) == ["ok-0", "ok-1", "ok-2"], page[-3000:]
    assert "DEAD_LETTERED" not in page


def test_every_status_shows_the_newest_runs_first(console: str) -> None:
    page = _get(console + "ns/default/runs?queue=q&hours=24")
    shown = re.findall(r'<a href="/console/ns/default/tasks/([\w-]+)">', page)
    assert shown[:2] == ["dl-2499", "dl-2498"] and len(shown) == 50
