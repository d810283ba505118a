"""Backend selection: one table per interface, clear errors, one Cassandra session per keyspace."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from server.wiring import (
    READY_QUEUES,
    RUN_HISTORIES,
    SCHEDULE_STORES,
    TASK_STORES,
    Drivers,
    build,
    open_backends,
)
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.errors import InvalidArgument
from tikk.settings import Settings
from tikk.store.cassandra.schedules import CassandraScheduleStore
from tikk.store.cassandra.tasks import CassandraTaskStore


def test_an_unknown_scheme_is_refused_naming_the_setting_and_the_known_ones() -> None:
    with pytest.raises(InvalidArgument, match=r"store_url.*'mongodb'.*sqlite, cassandra"):
        build(TASK_STORES, "store_url", "mongodb://h/db", 16, Drivers())


def test_every_interface_has_the_embedded_and_the_production_backend() -> None:
    assert set(TASK_STORES) == set(SCHEDULE_STORES) == set(RUN_HISTORIES) == {"sqlite", "cassandra"}
    assert set(READY_QUEUES) == {"local", "kafka"}


def test_backends_of_one_keyspace_share_one_session_and_others_do_not() -> None:
    drivers = Drivers()
    url = "cassandra://127.0.0.1:1/ks_a"
    tasks = build(TASK_STORES, "store_url", url, 16, drivers)
    schedules = build(SCHEDULE_STORES, "store_url", url, 16, drivers)
    assert isinstance(tasks, CassandraTaskStore) and isinstance(schedules, CassandraScheduleStore)
    assert drivers.cassandra(url, "store_url") is tasks.session
    assert drivers.cassandra("cassandra://127.0.0.1:1/ks_b", "history_url") is not tasks.session
    assert Drivers().cassandra(url, "store_url") is not tasks.session  # one set per process


async def test_construction_opens_nothing_and_start_opens_the_files(tmp_path: Path) -> None:
    settings = Settings(
        store_url=f"sqlite://{tmp_path / 'data' / 'tikk.db'}",
        history_url=f"sqlite://{tmp_path / 'data' / 'history.db'}",
        queue_url=f"local://{tmp_path / 'data' / 'queue.db'}",
    )
    build(TASK_STORES, "store_url", settings.store_url, 16, Drivers())
    assert not (tmp_path / "data").exists()
    backends = await open_backends(settings)
    try:
        assert {p.name for p in (tmp_path / "data").glob("*.db")} >= {"tikk.db", "history.db"}
        assert backends.store.shard_count == settings.shard_count
    finally:
        await backends.close()


class CountingSession(CassandraSession):
    """The session's sharing, with the driver's blocking connect and shutdown counted."""

    connects = shutdowns = 0

    def connect(self) -> None:
        time.sleep(0.05)  # long enough for a second start to arrive meanwhile
        self.connects += 1
        self._session = object()

    def shutdown(self) -> None:
        self.shutdowns += 1
        self._session = None


async def test_a_shared_session_connects_once_and_shuts_down_with_its_last_user() -> None:
    session = CountingSession(CassandraConfig.from_url("cassandra://127.0.0.1:1/ks"))
    await asyncio.gather(session.start(), session.start())
    assert session.connects == 1
    await session.close()
    assert session.shutdowns == 0
    await session.close()
    assert session.shutdowns == 1
