"""The Kafka login both sides of the ready queue share (the dispatcher's producer, the worker's
consumer): one connection that proves the URL's credentials and TLS before any client starts.

aiokafka's clients fold every bootstrap failure, a refused password as much as a broker that
is down, into one ``KafkaConnectionError``; only a connection of our own sees the difference.
So ``check_login`` tells a refusal (``BackendRefused``: wrong user or password, a SASL
mechanism the broker does not offer, a certificate nobody trusts, a URL without a login for a
broker that hangs up on it) from a broker that does not answer (``BackendUnavailable``).

Needs the ``kafka`` extra (aiokafka); the worker SDK may import this module (its only import
of ``tikk`` beyond the stubs, the errors and the queue contract).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from tikk.errors import BackendRefused, BackendUnavailable
from tikk.queue_contract import KafkaQueueUrl

try:
    from aiokafka.conn import create_conn
    from aiokafka.errors import (
        IllegalSaslStateError,
        KafkaConnectionError,
        KafkaError,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
    )
    from aiokafka.protocol.metadata import MetadataRequest
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kafka:// queues need aiokafka: pip install 'tikk[kafka]'") from exc

# One login attempt per broker takes at most this long.
_LOGIN_TIMEOUT_S = 10.0
_REFUSALS: tuple[type[BaseException], ...] = (
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
    IllegalSaslStateError,
)


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
                conn = await create_conn(host, int(port), **options)
                try:
                    await conn.send(MetadataRequest([]))  # the first request after the login
                finally:
                    conn.close()
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
