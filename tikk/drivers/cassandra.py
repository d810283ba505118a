"""A Cassandra session for asyncio: prepared statements only, driver errors translated once;
and the migration runner that creates and upgrades a keyspace's tables.

URL: ``cassandra://host[:port][,host[:port]]/keyspace?consistency=LOCAL_QUORUM&dc=dc1``.
The driver runs its own I/O threads; results are handed to the event loop thread-safely.
One session serves every backend of a process that uses the same keyspace: each backend
``start()``s and ``close()``s it, and the session connects on the first start and shuts down
on the last close.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tikk.errors import BackendUnavailable, InvalidArgument

try:
    from cassandra import ConsistencyLevel, DriverException
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
    from cassandra.query import BatchStatement, BatchType, PreparedStatement
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the Cassandra backends need the cassandra extra: pip install 'tikk[cassandra]'"
    ) from exc


@dataclass(frozen=True)
class CassandraConfig:
    hosts: tuple[str, ...]
    port: int
    keyspace: str
    consistency: str = "LOCAL_QUORUM"
    local_dc: str | None = None

    @classmethod
    def from_url(cls, url: str, setting: str = "store_url") -> CassandraConfig:
        parts = urlsplit(url)
        if parts.scheme != "cassandra" or not parts.netloc:
            raise InvalidArgument(setting, f"expected cassandra://host:port/keyspace, got {url!r}")
        hosts, ports = [], set()
        for item in parts.netloc.split(","):
            host, _, port = item.partition(":")
            hosts.append(host)
            ports.add(int(port or 9042))
        if len(ports) != 1:
            raise InvalidArgument(setting, "all Cassandra hosts must use the same port")
        keyspace = parts.path.strip("/") or "tikk"
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        consistency = query.get("consistency", "LOCAL_QUORUM").upper()
        if consistency not in ConsistencyLevel.name_to_value:
            raise InvalidArgument(setting, f"unknown consistency level {consistency!r}")
        return cls(tuple(hosts), ports.pop(), keyspace, consistency, query.get("dc"))


class CassandraSession:
    """One driver session; ``execute`` awaits a prepared statement's result rows."""

    def __init__(self, config: CassandraConfig) -> None:
        self.config = config
        level = ConsistencyLevel.name_to_value[config.consistency]
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(config.local_dc)),
            consistency_level=level,
            serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
            request_timeout=15.0,
        )
        self._cluster = Cluster(
            list(config.hosts),
            port=config.port,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            protocol_version=5,
        )
        self._session: Session | None = None
        self._prepared: dict[str, PreparedStatement] = {}
        self._users = 0
        # Backends of one process may start at once; only the first connects.
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        """Connect on the first call; later calls only count another user."""
        async with self._starting:
            if self._session is None:
                await asyncio.to_thread(self.connect)
            self._users += 1

    async def close(self) -> None:
        """Shut the session down when its last user closes it."""
        self._users = max(0, self._users - 1)
        if self._users == 0:
            await asyncio.to_thread(self.shutdown)

    def connect(self) -> None:
        """Blocking connect (call via ``asyncio.to_thread``); translates failures."""
        try:
            self._session = self._cluster.connect()
        except DriverException as exc:
            raise BackendUnavailable(f"cassandra: {exc}") from exc
        except OSError as exc:
            raise BackendUnavailable(f"cassandra: {exc}") from exc

    @property
    def session(self) -> Session:
        if self._session is None:
            raise BackendUnavailable("cassandra session is not connected")
        return self._session

    def prepare(self, cql: str) -> PreparedStatement:
        """Prepared once per statement text (blocking on first use; cached afterwards)."""
        statement = self._prepared.get(cql)
        if statement is None:
            try:
                statement = self.session.prepare(qualify_tables(cql, self.config.keyspace))
            except DriverException as exc:
                raise BackendUnavailable(f"cassandra: {exc}") from exc
            self._prepared[cql] = statement
        return statement

    async def execute(self, cql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await self._run(self.prepare(cql).bind(params))

    async def execute_batch(
        self, items: Sequence[tuple[str, Sequence[Any]]], *, logged: bool = True
    ) -> None:
        """A LOGGED batch: either every statement is applied eventually, or none. Unlogged:
        one round trip, no atomicity (for idempotent writes the caller repeats on failure)."""
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        for cql, params in items:
            batch.add(self.prepare(cql), params)
        await self._run(batch)

    async def execute_conditional_batch(self, items: Sequence[tuple[str, Sequence[Any]]]) -> bool:
        """A batch of conditional statements on ONE partition: applied all-or-nothing through
        a single consensus round. Returns whether it was applied."""
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        for cql, params in items:
            batch.add(self.prepare(cql), params)
        rows = await self._run(batch)
        return bool(rows[0][0]) if rows else True

    async def _run(self, statement: Any) -> list[Any]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Any]] = loop.create_future()
        rows: list[Any] = []

        def on_rows(page: Any) -> None:
            rows.extend(page or ())
            if future.has_more_pages:
                future.start_fetching_next_page()
            else:
                loop.call_soon_threadsafe(_settle, done, rows, None)

        def on_error(exc: BaseException) -> None:
            err = BackendUnavailable(f"cassandra: {exc}")
            err.__cause__ = exc
            loop.call_soon_threadsafe(_settle, done, None, err)

        future = self.session.execute_async(statement)
        future.add_callbacks(on_rows, on_error)
        return await done

    def shutdown(self) -> None:
        """Blocking shutdown of the driver's connections and threads."""
        self._session = None
        self._cluster.shutdown()


# Where a statement names a table: DML, and the two forms of DDL migrations use.
_TABLE = re.compile(r"\b(FROM|INTO|UPDATE|CREATE TABLE IF NOT EXISTS|ALTER TABLE)\s+(\w+)\b")


def qualify_tables(cql: str, keyspace: str) -> str:
    """Statements name bare tables; the keyspace comes from configuration. Qualifying them
    (rather than a session-wide USE) is what Cassandra recommends for prepared statements."""
    return _TABLE.sub(lambda m: f"{m.group(1)} {keyspace}.{m.group(2)}", cql)


def _settle(done: asyncio.Future[list[Any]], rows: list[Any] | None, err: Exception | None) -> None:
    if done.done():
        return
    if err is not None:
        done.set_exception(err)
    else:
        done.set_result(rows or [])


@dataclass(frozen=True)
class Migration:
    """One numbered schema step of a component: idempotent CQL statements, each of the form
    ``CREATE TABLE IF NOT EXISTS t ...`` or ``ALTER TABLE t ...`` on a bare table name."""

    component: str
    version: int
    description: str
    statements: Sequence[str]


def migrate(
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
