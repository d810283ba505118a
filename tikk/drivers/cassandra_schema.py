"""Schema steps on Cassandra: each component's numbered, idempotent steps, and the runner
that creates a keyspace and applies the steps it has not recorded yet (``tikk migrate``).

A step is applied to a live cluster as well: its statements only add (a table, a column), so
servers of the previous version go on working while it runs, and Cassandra spreads the new
schema to every node before the runner records the step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from tikk.drivers.cassandra import CassandraSession, qualify_tables
from tikk.errors import InvalidArgument


@dataclass(frozen=True)
class Migration:
    """One numbered schema step of a component: idempotent CQL statements, each of the form
    ``CREATE TABLE IF NOT EXISTS t ...`` or ``ALTER TABLE t ...`` on a bare table name."""

    component: str
    version: int
    description: str
    statements: Sequence[str]


def run_migrations(
    session: CassandraSession, migrations: Sequence[Migration], replication: str
) -> list[Migration]:
    """Apply the steps not yet recorded in ``schema_migrations``; blocking. Returns the steps
    applied now. A step interrupted half-way is simply run again.

    DDL cannot be a prepared statement, so this is the one place that runs CQL text; it
    only ever runs the components' constant statements (plus the keyspace name from
    configuration, checked to be an identifier).
    """
    ks = session.config.keyspace
    if not ks.replace("_", "").isalnum():
        raise InvalidArgument("keyspace", f"keyspace name {ks!r} must be alphanumeric/underscore")
    _ensure_keyspace(session, replication)
    done = {
        (r.component, r.version)
        for r in session.session.execute(f"SELECT component, version FROM {ks}.schema_migrations")
    }
    applied = []
    for m in sorted(migrations, key=lambda m: (m.component, m.version)):
        if (m.component, m.version) in done:
            continue
        for statement in m.statements:
            session.session.execute(_qualified_ddl(statement, ks))
        session.session.execute(
            f"INSERT INTO {ks}.schema_migrations (component, version, description, applied_ms)"
            " VALUES (%s, %s, %s, %s)",
            (m.component, m.version, m.description, time.time_ns() // 1_000_000),
        )
        applied.append(m)
    return applied


def _ensure_keyspace(session: CassandraSession, replication: str) -> None:
    ks = session.config.keyspace
    session.session.execute(f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {replication}")
    session.session.execute(
        f"CREATE TABLE IF NOT EXISTS {ks}.schema_migrations ("
        "component text, version int, description text, applied_ms bigint,"
        " PRIMARY KEY (component, version))"
    )


def _qualified_ddl(statement: str, keyspace: str) -> str:
    if not statement.startswith(("CREATE TABLE IF NOT EXISTS ", "ALTER TABLE ")):
        raise ValueError(f"migration statement of unknown form: {statement[:40]!r}")
    return qualify_tables(statement, keyspace)
