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

Needs the ``kafka`` extra (aiokafka); the worker SDK may import this module (its only import
of ``tikk`` beyond the stubs, the errors, the clock and the queue contract).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
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
    from aiokafka.admin import NewTopic
    from aiokafka.conn import AIOKafkaConnection
    from aiokafka.errors import (
        IllegalSaslStateError,
        InvalidTopicError,
        KafkaConnectionError,
        KafkaError,
        NoError,
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
    """Create ``topics`` through the started admin client ``admin``, with the partitions and
    replication of ``config``. A topic that exists already (another dispatcher or a worker
    created it first) is a success. Returns the topics the broker refused, by name; every
    other one exists when this returns. Raises the driver's errors (``KafkaError``,
    ``OSError``): each side translates them where it calls."""
    new = [NewTopic(name, config.partitions, config.replication) for name in topics]
    response = await admin.create_topics(new)
    refused = []
    for topic, code, *rest in response.topic_errors:
        error = for_code(code)
        if error not in (NoError, TopicAlreadyExistsError):
            refused.append(TopicRefusal(topic, error, (rest[0] if rest else None) or "refused"))
    return sorted(refused, key=lambda r: r.topic)
