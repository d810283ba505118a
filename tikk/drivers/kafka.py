"""What both sides of the Kafka ready queue share (the dispatcher's producer, the worker's
consumer): the login, one connection that proves the URL's credentials and TLS before any
client starts; and the creation of topics, which either side may do first.

aiokafka's clients fold every bootstrap failure, a refused password as much as a broker that
is down, into one ``KafkaConnectionError``; only a connection of our own sees the difference.
So ``check_login`` tells a refusal (``BackendRefused``: wrong user or password, a SASL
mechanism the broker does not offer, a certificate nobody trusts, a URL without a login for a
broker that hangs up on it) from a broker that does not answer (``BackendUnavailable``).

``create_topics`` creates a queue's topics with the URL's partitions and replication. Either
side may have created one first, and that counts as created; a topic the broker refuses comes
back as a ``TopicRefusal``, which each side turns into its own error.

``sockets_released`` ends every ``close()`` of ours: it waits until the connections aiokafka's
clients closed have released their sockets, which aiokafka does not always wait for itself.

Needs the ``kafka`` extra (aiokafka); the worker SDK may import this module (its only import
of ``tikk`` beyond the stubs, the errors, the clock and the queue contract).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tikk.errors import (
    BackendRefused,
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    TikkError,
)
from tikk.queue_contract import KafkaQueueUrl

try:
    import aiokafka.client
    from aiokafka.admin import NewTopic
    from aiokafka.conn import AIOKafkaConnection
    from aiokafka.errors import (
        IllegalSaslStateError,
        InvalidTopicError,
        KafkaConnectionError,
        KafkaError,
        NoError,
        NotControllerError,
        SaslAuthenticationFailed,
        TopicAlreadyExistsError,
        UnsupportedSaslMechanismError,
        for_code,
    )
    from aiokafka.protocol.metadata import MetadataRequest
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kafka:// queues need aiokafka: pip install 'tikk[kafka]'") from exc

# One login attempt per broker takes at most this long.
_LOGIN_TIMEOUT_S = 10.0
# Waiting for a broker to acknowledge the end of a TLS session takes at most this long.
_CLOSE_TIMEOUT_S = 2.0
# A request of ours (a topic creation, a commit, an offset or backlog read) that takes longer
# fails, rather than holding up a create or a worker's fetch.
REQUEST_TIMEOUT_S = 10.0
_REFUSALS: tuple[type[BaseException], ...] = (
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
)


async def _closed(conn: Any) -> None:
    """Close a connection and wait until its socket is released: over TLS the close is a
    shutdown exchange that needs the event loop, and a loop that ends first (a short-lived
    process, a test) would leave the socket open."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_CLOSE_TIMEOUT_S):
            await conn.close()


# The connections of aiokafka's clients whose sockets may still be open: the future each one
# resolves once its socket is released (the one its ``close()`` returns) -> the connection,
# weakly; an entry goes when its future resolves. aiokafka closes some connections without
# waiting for that: the one a client bootstraps from (a local of ``AIOKafkaClient.bootstrap``,
# out of reach of anything our code holds), one dropped after a request timed out or its broker
# hung up, one whose login failed. Over TLS a close is an exchange with the broker that needs
# the event loop, and a loop that ends first leaves the socket open; a broker far away makes
# that likely.
_UNRELEASED: dict[asyncio.Future[None], weakref.ref[Any]] = {}


async def _create_conn(*args: Any, **kwargs: Any) -> Any:
    """What ``aiokafka.conn.create_conn`` does, noting the connection until its socket is
    released. Every client connects through ``aiokafka.client.create_conn``, and aiokafka has
    no other hook that sees a bootstrap connection, so it is replaced there (below); connections
    are made as before."""
    conn = AIOKafkaConnection(*args, **kwargs)
    try:
        await conn.connect()
    finally:
        _note(conn)  # a refused login has a socket to release too
    return conn


def _note(conn: Any) -> None:
    # aiokafka sets ``_protocol`` once the socket is open and never unsets it; a connection
    # without one has no socket, and its close future would never resolve. (Looked up with a
    # default: an aiokafka that renamed them loses the wait, not its connections.)
    closed = getattr(conn, "_closed_fut", None)
    if getattr(conn, "_protocol", None) is None or closed is None or closed.done():
        return
    for stale in [f for f in list(_UNRELEASED) if f.done() or f.get_loop().is_closed()]:
        _UNRELEASED.pop(stale, None)  # a loop that ended never resolves its futures
    _UNRELEASED[closed] = weakref.ref(conn)
    closed.add_done_callback(lambda done: _UNRELEASED.pop(done, None))


# Process-wide, for every aiokafka client (the last resort: see ``_create_conn``); all it adds
# is the note.
aiokafka.client.create_conn = _create_conn


async def sockets_released() -> None:
    """Wait until every connection of aiokafka's clients in this event loop that is closing (or
    that its client let go of) has released its socket, ``_CLOSE_TIMEOUT_S`` at most. Our
    ``close()`` methods end with it, so their caller's loop may end right after."""
    loop = asyncio.get_running_loop()
    closing = [
        future
        for future, conn in list(_UNRELEASED.items())
        if future.get_loop() is loop and not _in_use(conn())
    ]
    if closing:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await asyncio.wait(closing)


def _in_use(conn: Any) -> bool:
    """Whether ``conn`` is open and some client still holds it (not ours to wait for)."""
    return conn is not None and bool(conn.connected())


async def _log_in(host: str, port: int, options: dict[str, Any]) -> None:
    """One login and the first request after it; the connection is closed either way."""
    conn = AIOKafkaConnection(host, port, **options)
    try:
        await conn.connect()
    except (*_REFUSALS, KafkaConnectionError):
        # The broker refused a connection it had opened: connect closed it, and its socket
        # must be let go before the loop may end. (One never opened has nothing to wait for.)
        await _closed(conn)
        raise
    try:
        await conn.send(MetadataRequest([]))
    finally:
        await _closed(conn)


async def check_login(config: KafkaQueueUrl) -> None:
    """Log in to the first broker that answers and disconnect. Raises ``BackendRefused`` if a
    broker refuses the login, ``BackendUnavailable`` if none answers."""
    options = config.client_options()
    del options["bootstrap_servers"]
    failures: list[str] = []
    for broker in config.bootstrap_servers:
        host, _, port = broker.rpartition(":")
        try:
            async with asyncio.timeout(_LOGIN_TIMEOUT_S):
                await _log_in(host, int(port), options)
        except _REFUSALS as exc:
            raise _refused(config, broker, f"login failed ({type(exc).__name__})") from None
        except ssl.SSLCertVerificationError as exc:
            reason = f"its TLS certificate is not trusted ({exc.verify_message})"
            raise _refused(config, broker, reason) from None
        except KafkaConnectionError as exc:
            if config.credentials is None and "closed" in str(exc):
                # A broker that hangs up on the first request of a URL without a login wants
                # one (or TLS); a broker that is down refuses the connection or never answers.
                reason = "it closed the connection: it requires a login or TLS (user@, "
                reason += "password_file=, tls_ca=)"
                raise _refused(config, broker, reason) from None
            failures.append(f"{broker}: {_plain_reason(exc)}")
            continue
        except (KafkaError, OSError, TimeoutError) as exc:
            failures.append(f"{broker}: {_plain_reason(exc)}")
            continue
        return
    raise BackendUnavailable(f"kafka: no broker answered ({'; '.join(failures)})")


def _refused(config: KafkaQueueUrl, broker: str, reason: str) -> BackendRefused:
    return BackendRefused("kafka", broker, config.user, reason)


def _plain_reason(exc: Any) -> str:
    # A driver message may quote the request it failed on; the type and errno say enough.
    return f"{type(exc).__name__}{f' errno {exc.errno}' if getattr(exc, 'errno', None) else ''}"


@dataclass(frozen=True)
class TopicRefusal:
    """The broker's answer to a topic it would not create."""

    topic: str
    error: type[KafkaError]
    message: str

    def __str__(self) -> str:
        return f"creating topic {self.topic!r} failed: {self.error.__name__}: {self.message}"

    def as_error(self) -> TikkError:
        """A name Kafka will never take is the caller's problem, a retriable refusal is the
        broker's."""
        if getattr(self.error, "retriable", False):
            return BackendUnavailable(f"kafka: {self}")
        if self.error is InvalidTopicError:
            return InvalidArgument("queue", f"Kafka refuses the name: {self}")
        return FailedPrecondition(f"kafka: {self}")


async def create_topics(
    admin: Any, config: KafkaQueueUrl, topics: Iterable[str]
) -> list[TopicRefusal]:
    """Create ``topics`` through the started admin client ``admin``, with the partitions,
    replication and ``min.insync.replicas`` of ``config``. A topic that exists already
    (another dispatcher or a worker created it first) is a success. Returns the topics the
    broker refused, by name; every other one exists when this returns. Raises the driver's
    errors (``KafkaError``, ``OSError``): each side translates them where it calls."""
    settings = {"min.insync.replicas": str(config.min_insync or 1)}
    new = [
        NewTopic(name, config.partitions, config.replication, topic_configs=settings)
        for name in topics
    ]
    try:
        response = await admin.create_topics(new)
    except AttributeError as exc:
        # aiokafka reads the controller's node id without checking it is known: while the
        # brokers restart, its metadata has no controller and this is an AttributeError.
        # It is a broker not ready yet, retriable like any other.
        raise NotControllerError(f"no Kafka controller is known yet ({exc})") from None
    refused = []
    for topic, code, *rest in response.topic_errors:
        error = for_code(code)
        if error not in (NoError, TopicAlreadyExistsError):
            refused.append(TopicRefusal(topic, error, (rest[0] if rest else None) or "refused"))
    return sorted(refused, key=lambda r: r.topic)
