"""A Cassandra session for asyncio: prepared statements only, driver errors translated once
(the migration runner is ``tikk.drivers.cassandra_schema``).

URL: ``cassandra://[user@]host[:port][,host[:port]]/keyspace?consistency=LOCAL_QUORUM&dc=dc1``
plus the password and TLS options of ``tikk.urls`` (``password_file=``, ``tls_ca=``, ...): the
user logs in through Cassandra's ``PasswordAuthenticator``. Credentials that are refused, or a
server certificate that is not trusted, fail the first ``start()`` with ``BackendRefused``.
The driver runs its own I/O threads; results are handed to the event loop thread-safely.
One session serves every backend of a process that uses the same keyspace: each backend
``start()``s and ``close()``s it, and the session connects on the first start and shuts down
on the last close.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import threading
from collections import namedtuple
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tikk.drivers.cassandra_batches import PartitionRow, packed
from tikk.drivers.cassandra_counters import CounterTally
from tikk.errors import BackendRefused, BackendUnavailable, InvalidArgument
from tikk.urls import BackendUrl, Credentials, TlsFiles

log = logging.getLogger("tikk.cassandra")

# What ``ping`` reads: one row of one partition of a table every migrated keyspace has.
_PING = "SELECT version FROM schema_migrations WHERE component = ? LIMIT 1"
# The longest TTL Cassandra accepts (20 years): every TTL tikk writes is capped to it.
MAX_TTL_S = 630_720_000

# A statement that may be sent twice goes to a second coordinator when the first has not
# answered within this (a node that stopped answering holds its requests for the whole
# request timeout otherwise); past what a busy healthy node takes, so it rarely doubles one.
SPECULATE_AFTER_S = 1.0
# Idle connections are pinged this often and dropped after as long unanswered, so a node that
# stopped answering is marked down, and conditional writes leave it, within about two.
HEARTBEAT_S = 5
# A conditional statement (a lightweight transaction) or a counter's increment must not be
# sent twice: the second would see the first's effect (``[applied] = False``) or add again.
_NOT_IDEMPOTENT = re.compile(r"\bIF\b|\b(\w+)\s*=\s*\1\s*[-+]", re.IGNORECASE)

try:
    from cassandra import AuthenticationFailed, ConsistencyLevel, DriverException
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import (
        EXEC_PROFILE_DEFAULT,
        Cluster,
        ExecutionProfile,
        NoHostAvailable,
        Session,
    )
    from cassandra.policies import (
        ConstantSpeculativeExecutionPolicy,
        DCAwareRoundRobinPolicy,
        TokenAwarePolicy,
    )
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
    credentials: Credentials | None = None
    tls: TlsFiles | None = None

    @classmethod
    def from_url(cls, url: str, setting: str = "store_url") -> CassandraConfig:
        secured = BackendUrl.parse(setting, url)
        parts = urlsplit(secured.bare)
        if parts.scheme != "cassandra" or not parts.netloc:
            raise InvalidArgument(
                setting, f"expected cassandra://host:port/keyspace, got {secured.redacted()!r}"
            )
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
        secured.ssl_context()  # unreadable TLS files are a bad setting, named now
        return cls(
            tuple(hosts), ports.pop(), keyspace, consistency, query.get("dc"),
            secured.credentials, secured.tls,
        )  # fmt: skip

    @property
    def where(self) -> str:
        """host:port[,host:port] for messages."""
        return ",".join(f"{h}:{self.port}" for h in self.hosts)


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
            row_factory=_RowTypes().rows,
            speculative_execution_policy=ConstantSpeculativeExecutionPolicy(
                SPECULATE_AFTER_S, max_attempts=1
            ),
        )
        login = config.credentials
        self._cluster = Cluster(
            list(config.hosts),
            port=config.port,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            protocol_version=5,
            auth_provider=None if login is None else PlainTextAuthProvider(*astuple(login)),
            ssl_context=None if config.tls is None else config.tls.context("cassandra"),
            idle_heartbeat_interval=HEARTBEAT_S,
            idle_heartbeat_timeout=HEARTBEAT_S,
        )
        self._session: Session | None = None
        self._prepared: dict[str, PreparedStatement] = {}
        self._users = 0
        # Counter updates of every backend of the session, written in the background.
        self.counters = CounterTally(self)
        # Backends of one process may start at once; only the first connects.
        self._starting = asyncio.Lock()

    async def start(self) -> None:
        """Connect on the first call; later calls only count another user."""
        async with self._starting:
            if self._session is None:
                await asyncio.to_thread(self.connect)
                self.counters.start()
            self._users += 1

    async def close(self) -> None:
        """Shut the session down when its last user closes it (its counters flushed first)."""
        self._users = max(0, self._users - 1)
        if self._users == 0:
            await self.counters.stop()
            await asyncio.to_thread(self.shutdown)

    def connect(self) -> None:
        """Blocking connect (call via ``asyncio.to_thread``); translates failures."""
        try:
            self._session = self._cluster.connect()
        except NoHostAvailable as exc:
            refusal = _refusal(exc, self.config)
            if refusal:
                user = self.config.credentials.user if self.config.credentials else ""
                raise BackendRefused("cassandra", self.config.where, user, refusal) from None
            raise BackendUnavailable(f"cassandra: {exc}") from exc
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
            except (DriverException, NoHostAvailable) as exc:  # the latter is not the former
                raise BackendUnavailable(f"cassandra: {exc}") from exc
            statement.is_idempotent = is_idempotent(cql)
            self._prepared[cql] = statement
        return statement

    async def ping(self, component: str) -> None:
        """Read one row of ``component``'s schema steps at the session's consistency: the
        cheapest read that needs the keyspace's replicas (a quorum of them at QUORUM),
        not only the node that coordinates it. ``BackendUnavailable`` if they do not
        answer."""
        await self.execute(_PING, [component])

    async def execute(self, cql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await self._run(self.bind(cql, params))

    async def execute_batch(
        self, items: Sequence[tuple[str, Sequence[Any]]], *, logged: bool = True
    ) -> None:
        """A LOGGED batch: either every statement is applied eventually, or none. Unlogged:
        one round trip, no atomicity (for idempotent writes the caller repeats on failure)."""
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        await self._run(self._filled(batch, items))

    async def execute_conditional_batch(self, items: Sequence[tuple[str, Sequence[Any]]]) -> bool:
        """A batch of conditional statements on ONE partition: applied all-or-nothing through
        a single consensus round. Returns whether it was applied."""
        batch = BatchStatement(batch_type=BatchType.LOGGED)
        for cql, params in items:
            batch.add(self.prepare(cql), params)
        rows = await self._run(batch)
        return bool(rows[0][0]) if rows else True

    def bind(self, cql: str, params: Sequence[Any]) -> Any:
        """A bound statement, for ``execute_many``."""
        return self.prepare(cql).bind(params)

    def partition_batches(
        self, rows: Iterable[PartitionRow], partitions_per_batch: int = 1
    ) -> list[Any]:
        """Unlogged batches of ``rows`` (each names its partition), the rows of a partition
        kept together: a batch whose rows share a partition is one mutation on one replica
        set, the cheapest way to write them. ``partitions_per_batch`` > 1 packs several small
        partitions into one batch as well: the coordinator then splits it, but the client
        sends and settles one request instead of many, and on this driver a request's own
        cost is most of what a small write costs (at most ``MAX_BATCH_PARTITIONS``, which
        Cassandra warns above). Split below Cassandra's default batch size limit; a batch of
        one row is sent as the statement alone."""
        return [self._batch_of(rows) for rows in packed(rows, partitions_per_batch)]

    def _batch_of(self, rows: Sequence[PartitionRow]) -> Any:
        if len(rows) == 1:  # a batch of one costs more than the statement alone
            return self.bind(rows[0].cql, rows[0].params)
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        return self._filled(batch, [(row.cql, row.params) for row in rows])

    def _filled(self, batch: Any, items: Sequence[tuple[str, Sequence[Any]]]) -> Any:
        """``batch`` with ``items`` added, idempotent if each statement is: as each prepared
        statement says (decided once, when it was prepared; reading every statement's text
        again for each batch was 7 % of a server's CPU)."""
        idempotent = True
        for cql, params in items:
            statement = self.prepare(cql)
            batch.add(statement, params)
            idempotent = idempotent and statement.is_idempotent
        batch.is_idempotent = idempotent
        return batch

    async def execute_many(self, statements: Sequence[Any], window: int = 256) -> list[list[Any]]:
        """Run ``statements`` (bound or batches) with at most ``window`` in flight; the rows
        of each, in order. Each next request is sent from the driver's own callback and the
        event loop wakes once for the lot, which is most of what a statement costs here.
        Raises ``BackendUnavailable`` for the first failure, once every statement settled."""
        if not statements:
            return []
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[list[Any]]] = loop.create_future()
        _Chain(self.session, statements, window, loop, done).start()
        return await done

    async def _run(self, statement: Any) -> list[Any]:
        """One statement, through the same path as ``execute_many``."""
        [rows] = await self.execute_many([statement])
        return rows

    def shutdown(self) -> None:
        """Blocking shutdown of the driver's connections and threads."""
        self._session = None
        self._cluster.shutdown()


def is_idempotent(cql: str) -> bool:
    """Whether ``cql`` may be sent twice to the effect of once (so retried on another node, or
    sent there speculatively): a read or a write of values, not a condition or an increment."""
    return _NOT_IDEMPOTENT.search(cql) is None


def _refusal(exc: NoHostAvailable, config: CassandraConfig) -> str:
    """Why every host refused us for good (bad credentials, no credentials where a password is
    required, a certificate nobody trusts), or "" for a network failure worth retrying."""
    for error in exc.errors.values():
        if isinstance(error, AuthenticationFailed):
            if config.credentials is None:
                return "it requires a login (add user@ and password_file= to the URL)"
            return "authentication failed (wrong user or password)"
        if isinstance(error, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(
            error
        ):
            return "its TLS certificate is not trusted (tls_ca= names the CA to trust)"
    return ""


class _RowTypes:
    """Rows as named tuples, with one tuple type per column list. The driver's own factory
    builds a new type for every result that carries its columns, which every conditional
    write's answer does: that was a quarter of the CPU of a create with a client id."""

    def __init__(self) -> None:
        self._types: dict[tuple[str, ...], Any] = {}

    def rows(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Any]:
        key = tuple(columns)
        row_type = self._types.get(key)
        if row_type is None:
            names = [re.sub(r"\W", "", c).strip("_") or "column" for c in key]
            row_type = self._types.setdefault(key, namedtuple("Row", names, rename=True))
        return [row_type(*row) for row in rows]


class _Chain:
    """``execute_many``'s state, shared by the event loop thread that starts it and the
    driver threads whose callbacks settle statements and send the next ones."""

    def __init__(
        self,
        session: Session,
        statements: Sequence[Any],
        window: int,
        loop: asyncio.AbstractEventLoop,
        done: asyncio.Future[list[list[Any]]],
    ) -> None:
        self._session = session
        self._todo = iter(enumerate(statements))
        self._results: list[list[Any]] = [[] for _ in statements]
        self._left = len(statements)
        self._error: BaseException | None = None
        self._loop, self._done = loop, done
        self._lock = threading.Lock()
        self._owed = min(window, len(statements))  # sends owed to free slots
        self._sending = False
        # Whether each statement awaits an answer (sent, or its next page asked for). The
        # driver answers a statement twice when a speculative execution and the first
        # attempt both come back (``ResponseFuture._set_final_result`` has no guard): counted
        # twice, a lot would end before another statement answered and hand that one back
        # with no rows, and a claim that reads no task row drops the due row it fires.
        self._awaiting = [False] * len(statements)

    def start(self) -> None:
        self._send_owed()

    def _send_owed(self) -> None:
        """Send one statement per owed slot. Only one thread sends at a time: a callback that
        runs inside ``execute_async`` (a result that was already there) only adds to the debt,
        so the stack never grows with the number of statements."""
        with self._lock:
            if self._sending:
                return
            self._sending = True
        while True:
            with self._lock:
                item = next(self._todo, None) if self._owed else None
                if item is None:
                    self._sending = False
                    return
                self._owed -= 1
            self._send(*item)

    def _send(self, index: int, statement: Any) -> None:
        self._awaiting[index] = True
        try:
            future = self._session.execute_async(statement)
        except Exception as exc:  # the driver refused it outright (e.g. no connection)
            self._settle(index, exc)
            return
        future.add_callbacks(
            self._on_rows, self._on_error, callback_args=(index, future), errback_args=(index,)
        )

    def _answered(self, index: int) -> bool:
        """Take an answer of statement ``index``: False for a second one (ignored)."""
        with self._lock:
            awaited, self._awaiting[index] = self._awaiting[index], False
        if not awaited:
            log.info("cassandra: a statement answered twice (a speculative execution); ignored")
        return awaited

    def _on_rows(self, rows: Any, index: int, future: Any) -> None:
        if not self._answered(index):
            return
        self._results[index].extend(rows or ())
        if future.has_more_pages:
            self._awaiting[index] = True
            future.start_fetching_next_page()
        else:
            self._settle(index, None)

    def _on_error(self, exc: BaseException, index: int) -> None:
        if self._answered(index):
            self._settle(index, exc)

    def _settle(self, index: int, exc: BaseException | None) -> None:
        with self._lock:
            if exc is not None and self._error is None:
                self._error = exc
            self._left -= 1
            self._owed += 1
            last = self._left == 0
        if last:
            self._loop.call_soon_threadsafe(self._finish)
        else:
            self._send_owed()

    def _finish(self) -> None:
        if self._done.done():
            return
        if self._error is not None:
            err = BackendUnavailable(f"cassandra: {self._error}")
            err.__cause__ = self._error
            self._done.set_exception(err)
        else:
            self._done.set_result(self._results)


# Where a statement names a table: DML, and the two forms of DDL migrations use.
_TABLE = re.compile(r"\b(FROM|INTO|UPDATE|CREATE TABLE IF NOT EXISTS|ALTER TABLE)\s+(\w+)\b")


def qualify_tables(cql: str, keyspace: str) -> str:
    """Statements name bare tables; the keyspace comes from configuration. Qualifying them
    (rather than a session-wide USE) is what Cassandra recommends for prepared statements."""
    return _TABLE.sub(lambda m: f"{m.group(1)} {keyspace}.{m.group(2)}", cql)
