"""One migrated Cassandra keyspace per test run, emptied between tests (TRUNCATE is far
cheaper than creating tables per test)."""

from __future__ import annotations

import os

from history.cassandra import HISTORY_MIGRATIONS
from tests.services import CASSANDRA, require, with_login
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.drivers.cassandra_schema import run_migrations
from tikk.store.cassandra.schema import STORE_MIGRATIONS

REPLICATION = "{'class': 'SimpleStrategy', 'replication_factor': 1}"
_TABLES = [
    "tasks", "due_index", "cursors", "tasks_by_queue", "dead_letters",
    "runs", "runs_by_task", "runs_by_queue", "schedules", "schedules_by_namespace",
    "schedule_occurrences", "store_meta", "start_claims", "credentials", "namespace_quotas",
    "task_usage", "quota_rate", "tasks_by_label", "bulk_actions", "bulk_actions_running",
    "queue_controls", "parked_rows",
]  # fmt: skip


class TestKeyspace:
    def __init__(self) -> None:
        self.name = f"tikk_test_{os.getpid()}"
        self._session: CassandraSession | None = None

    def url(self) -> str:
        return with_login(f"cassandra://{require('cassandra', CASSANDRA)}/{self.name}")

    def fresh(self) -> str:
        """The keyspace's URL, migrated and with every table empty."""
        url = self.url()
        if self._session is None:
            self._session = CassandraSession(CassandraConfig.from_url(url))
            self._session.connect()
            run_migrations(self._session, [*STORE_MIGRATIONS, *HISTORY_MIGRATIONS], REPLICATION)
        for table in _TABLES:
            self._session.session.execute(f"TRUNCATE {self.name}.{table}")
        return url

    def reconnect(self) -> None:
        """Forget the session (after the node restarted: the driver would wait out its
        reconnection backoff); the next ``fresh`` opens a new one."""
        if self._session is not None:
            self._session.shutdown()
            self._session = None

    def drop(self) -> None:
        if self._session is not None:
            self._session.session.execute(f"DROP KEYSPACE IF EXISTS {self.name}")
            self._session.shutdown()
