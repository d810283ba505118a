"""A Cassandra run history written before runs kept the server's time upgrades in place: its
runs stay where they were filed (by their finish time), read back whole, and runs recorded
since are filed by the server's time. A step interrupted before it was recorded runs again
harmlessly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from history.cassandra import HISTORY_MIGRATIONS, CassandraRunHistory
from history.run_history import RUN_COLUMNS, run_values
from tests.contract.cassandra_keyspace import REPLICATION
from tests.factories import T0, make_run
from tests.services import CASSANDRA, require, with_login
from tikk.drivers.cassandra import CassandraConfig, CassandraSession, qualify_tables
from tikk.drivers.cassandra_schema import run_migrations
from tikk.model import RunQuery

HOUR = 3_600_000
# Columns a later release added.
_LATER = ("recorded_ms", "traceback")
_BEFORE = [m for m in HISTORY_MIGRATIONS if m.version <= 2]
_UPGRADE = [m for m in HISTORY_MIGRATIONS if m.version > 2]


@pytest.fixture
def released() -> Iterator[tuple[str, CassandraSession]]:
    """A keyspace with the history schema as released before the upgrade, one run in it."""
    keyspace = f"tikk_history_up_{uuid.uuid4().hex[:10]}"
    url = with_login(f"cassandra://{require('cassandra', CASSANDRA)}/{keyspace}")
    session = CassandraSession(CassandraConfig.from_url(url))
    session.connect()
    run_migrations(session, _BEFORE, REPLICATION)
    old = make_run("old", finished_ms=T0 - HOUR)
    columns = [c for c in RUN_COLUMNS if c not in _LATER]
    values = [v for c, v in zip(RUN_COLUMNS, run_values(old), strict=True) if c not in _LATER]
    hour = old.finished_ms // HOUR
    for table, extra, more in (("runs", "", []), ("runs_by_task", "", []),
                               ("runs_by_queue", ", hour", [hour])):  # fmt: skip
        marks = ", ".join(["%s"] * (len(columns) + len(more)))
        cql = f"INSERT INTO {keyspace}.{table} ({', '.join(columns)}{extra}) VALUES ({marks})"
        session.session.execute(cql, [*values, *more])
    yield url, session
    session.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
    session.shutdown()


async def test_a_released_history_keeps_its_runs_and_files_new_ones_by_server_time(
    released: tuple[str, CassandraSession],
) -> None:
    url, session = released
    keyspace = session.config.keyspace
    assert _UPGRADE
    for step in _UPGRADE:
        assert run_migrations(session, [step], REPLICATION) == [step]
        # As if interrupted before the step was recorded: its statements run again.
        for statement in step.statements:
            session.session.execute(qualify_tables(statement, keyspace))
    history = CassandraRunHistory(CassandraSession(CassandraConfig.from_url(url)))
    await history.start()
    try:
        old = await history.get("default", "old")
        assert old == make_run("old", finished_ms=T0 - HOUR)
        new = make_run("new", finished_ms=T0 - 5 * HOUR, recorded_ms=T0 - 1)
        await history.append(new)
        found = await history.list_by_queue(RunQuery("default", "q", T0 - HOUR, T0), 10, "")
        assert found.items == [new, old]
        runs = await history.list_for_task("default", "t1", 10, "")
        assert runs.items == [new, old]
    finally:
        await history.close()
