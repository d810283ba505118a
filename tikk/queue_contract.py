"""What both sides of the ready queue must agree on: the one home of its wire contract.

The producer (``dispatcher.ready_queue``, in the dispatcher and the server) and the consumer
(``worker_sdk.queues``, in workers) never import each other, and a worker may run a different
release than its server. Everything that has to match between them is here: queue and topic
names, the ``kafka://`` URL, consumer groups, Kafka record headers, the embedded queue's table.
Message bodies are serialised ``tikk.v1`` messages (``tikk.delivery_codec`` writes them).

Standard library only (and ``tikk.errors``, a leaf, and ``tikk.urls``, standard library only
itself), so that ``worker_sdk`` can import
it without pulling in the server's modules or any driver.

**Queue names.** A new task's queue matches ``NEW_QUEUE_NAME`` and does not end in
``FOLDED_DEAD_LETTER_SUFFIX``: Kafka takes ``.`` and ``_`` in topic names as one character, so
``a.b`` would collide with ``a_b`` and ``q_dlq`` with the dead-letter topic of ``q``. Names
stored by older versions match the wider ``QUEUE_NAME``. The dead letters of queue ``q`` go to
the stream ``q.dlq`` (``dead_letter_queue``).

**Kafka.** ``kafka://[user@]host:port[,host:port...][?prefix=tikk.&partitions=8&replication=1&min_insync=N]``
(``KafkaQueueUrl``), plus the password, TLS and ``sasl=`` options of ``tikk.urls``: a user logs
in with SASL (SCRAM-SHA-256 unless ``sasl=`` says otherwise), over TLS when TLS is asked for.
Queue ``q`` is the topic ``<prefix>q``, its dead letters ``<prefix>q.dlq``, and its workers
form the consumer group ``<prefix>workers.q``. Either side creates a missing
topic with ``partitions`` partitions, ``replication`` replicas and ``min_insync`` of them that
must hold a record before it is acknowledged (default: 2 from 3 replicas on, else 1). A
record's key is the task key, its value the serialised delivery, and its headers the W3C
trace context (``TRACE_KEYS``, so that any traced Kafka consumer continues the trace).

**Embedded queue.** ``local://PATH``: a SQLite file holding the table of
``LOCAL_QUEUE_SCHEMA``; ``LocalQueueSql`` has every statement either side runs on it. A message
is visible from ``visible_ms``; a consumer leases it by moving ``visible_ms`` into the future
with a fresh ``lease`` token, and deletes it (its commit) once the server acknowledged the
result. A worker that dies lets its lease run out, and the message is delivered again
(at-least-once). The producer creates the table; a consumer that finds none sees no messages.
The trace context travels inside the delivery (there are no headers).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tikk.errors import InvalidArgument
from tikk.urls import BackendUrl, Credentials, TlsFiles, redact

LOCAL_SCHEME = "local"
KAFKA_SCHEME = "kafka"
QUEUE_SCHEMES = (LOCAL_SCHEME, KAFKA_SCHEME)

# Queue names.
# A name some version of tikk accepted (older versions allowed '.'): what may be stored.
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The name of a new task's queue: it collides with no other queue's topic on Kafka.
NEW_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
MAX_QUEUE_NAME_LENGTH = 128
DEAD_LETTER_SUFFIX = ".dlq"
# How the dead-letter suffix reads once Kafka takes '.' as '_'.
FOLDED_DEAD_LETTER_SUFFIX = "_dlq"
# What a topic prefix may contain.
TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]*")

# The W3C trace-context keys: Kafka record headers, and the keys of a delivery's trace context.
TRACE_KEYS = ("traceparent", "tracestate")

KAFKA_URL_OPTIONS = ("prefix", "partitions", "replication", "min_insync")


def dead_letter_queue(queue: str) -> str:
    """Name of the dead-letter stream of ``queue``."""
    return queue + DEAD_LETTER_SUFFIX


def is_dead_letter_queue(name: str) -> bool:
    """Whether ``name`` is a dead-letter stream rather than a task queue."""
    return name.endswith(DEAD_LETTER_SUFFIX)


def is_new_queue_name(name: str, max_length: int = MAX_QUEUE_NAME_LENGTH) -> bool:
    """Whether a new task may be given queue ``name`` (see the module docstring)."""
    return (
        len(name) <= max_length
        and NEW_QUEUE_NAME.fullmatch(name) is not None
        and not name.endswith(FOLDED_DEAD_LETTER_SUFFIX)
    )


def split_queue_url(url: str) -> tuple[str, str]:
    """(scheme, rest) of a queue URL; raises ``InvalidArgument`` (field ``queue_url``) naming
    the known schemes when it is not one of them."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or not rest:
        raise _bad(url, "expected scheme://location")
    if scheme not in QUEUE_SCHEMES:
        known = ", ".join(QUEUE_SCHEMES)
        raise _bad(url, f"unsupported queue scheme {scheme!r} (known: {known})")
    return scheme, rest


def trace_headers(trace_context: Mapping[str, str]) -> tuple[tuple[str, bytes], ...]:
    """The Kafka record headers that carry ``trace_context``."""
    return tuple((k, trace_context[k].encode()) for k in TRACE_KEYS if k in trace_context)


def trace_carrier(headers: Mapping[str, str], carried: Mapping[str, str]) -> dict[str, str]:
    """The trace context a consumer continues: the one in the message ``headers`` (Kafka), else
    the one ``carried`` inside the delivery (the embedded queue has no headers)."""
    found = {k: headers[k] for k in TRACE_KEYS if k in headers}
    return found or {k: carried[k] for k in TRACE_KEYS if k in carried}


def default_min_insync(replication: int) -> int:
    """The ``min.insync.replicas`` of a topic of ``replication`` replicas when the URL names
    none: 2 from 3 replicas on, else 1 (with 2 replicas, 2 would stop writes at any one
    broker's loss)."""
    return 2 if replication >= 3 else 1


@dataclass(frozen=True)
class KafkaQueueUrl:
    """Where the queues live and how their topics are made, parsed from the queue URL; the
    names of a queue's topics and group."""

    bootstrap_servers: tuple[str, ...]
    prefix: str = "tikk."
    partitions: int = 8
    replication: int = 1
    # Replicas that must hold a record before the producer (acks=all) is told it is written:
    # the topic's ``min.insync.replicas``. Default: 2 once there are 3 replicas (a write
    # survives the loss of any one broker, and one broker's loss never stops writes), else 1.
    min_insync: int = 0
    credentials: Credentials | None = None
    tls: TlsFiles | None = None
    sasl: str = ""
    # How the URL may be shown (``BackendUrl.redacted``): no password.
    shown: str = ""

    @classmethod
    def from_url(cls, url: str) -> KafkaQueueUrl:
        """Parse ``kafka://[user@]host:port[,host:port][?prefix=&partitions=&replication=]``
        and the security options of ``tikk.urls``; raises ``InvalidArgument`` (field
        ``queue_url``) naming what is wrong, never showing a password."""
        secured = BackendUrl.parse("queue_url", url)
        url = secured.bare
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != KAFKA_SCHEME or not parts.netloc or parts.path not in ("", "/"):
            raise _bad(url, "expected kafka://host:port[,host:port][?prefix=...&partitions=...]")
        options = _url_options(url, parts.query)
        prefix = options.get("prefix", cls.prefix)
        if not TOPIC_CHARS.fullmatch(prefix):
            raise _bad(url, "prefix may contain only A-Z a-z 0-9 . _ -")
        replication = _positive(url, options, "replication", cls.replication)
        min_insync = _positive(url, options, "min_insync", default_min_insync(replication))
        if min_insync > replication:
            raise _bad(url, f"min_insync={min_insync} is more than replication={replication}")
        return cls(
            bootstrap_servers=_brokers(url, parts.netloc),
            prefix=prefix,
            partitions=_positive(url, options, "partitions", cls.partitions),
            replication=replication,
            min_insync=min_insync,
            credentials=secured.credentials,
            tls=secured.tls,
            sasl=secured.sasl or ("SCRAM-SHA-256" if secured.credentials else ""),
            shown=secured.redacted(),
        )

    @property
    def user(self) -> str:
        return self.credentials.user if self.credentials is not None else ""

    def client_options(self) -> dict[str, Any]:
        """The connection keyword arguments of every aiokafka client (producer, consumer,
        admin) on both sides: brokers, security protocol, SASL login and TLS context."""
        options: dict[str, Any] = {"bootstrap_servers": list(self.bootstrap_servers)}
        protocol = "SSL" if self.tls is not None else "PLAINTEXT"
        if self.credentials is not None:
            protocol = "SASL_" + ("SSL" if self.tls is not None else "PLAINTEXT")
            options.update(
                sasl_mechanism=self.sasl,
                sasl_plain_username=self.credentials.user,
                sasl_plain_password=self.credentials.password,
            )
        if self.tls is not None:
            options["ssl_context"] = self.tls.context("queue_url")
        options["security_protocol"] = protocol
        return options

    def topic(self, queue: str) -> str:
        """The topic of ``queue`` (of a dead-letter stream too: ``topic(dead_letter_queue(q))``)."""
        return self.prefix + queue

    def dead_letter_topic(self, queue: str) -> str:
        return self.topic(dead_letter_queue(queue))

    def group(self, queue: str) -> str:
        """The consumer group of the queue's workers: one per queue, not per worker's set of
        queues, since a worker of ``[email, sms]`` and one of ``[email]`` must split ``email``."""
        return f"{self.prefix}workers.{queue}"

    def queue_of(self, topic: str) -> str | None:
        """The task queue whose topic is ``topic``; None for a dead-letter topic or a topic
        that is not a queue's."""
        if not topic.startswith(self.prefix):
            return None
        name = topic[len(self.prefix) :]
        if not QUEUE_NAME.fullmatch(name) or is_dead_letter_queue(name):
            return None
        return name


def _bad(url: str, reason: str) -> InvalidArgument:
    return InvalidArgument("queue_url", f"{reason} (got {redact(url)!r})")


def _url_options(url: str, query: str) -> dict[str, str]:
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    options = dict(pairs)
    unknown = sorted(options.keys() - set(KAFKA_URL_OPTIONS))
    if unknown:
        known = ", ".join(KAFKA_URL_OPTIONS)
        raise _bad(url, f"unknown option {unknown[0]!r} (known: {known})")
    if len(options) != len(pairs):
        raise _bad(url, "an option is given twice")
    return options


def _brokers(url: str, netloc: str) -> tuple[str, ...]:
    brokers = tuple(netloc.split(","))
    for broker in brokers:
        host, sep, port = broker.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise _bad(url, f"broker {broker!r} is not host:port")
    return brokers


def _positive(url: str, options: dict[str, str], name: str, default: int) -> int:
    text = options.get(name, str(default))
    if not text.isdigit() or int(text) < 1:
        raise _bad(url, f"{name} must be a positive integer")
    return int(text)


LOCAL_QUEUE_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    message_key TEXT NOT NULL,
    body BLOB NOT NULL,
    enqueued_ms INTEGER NOT NULL,
    visible_ms INTEGER NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 0,
    lease TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, visible_ms, id);
"""


class LocalQueueSql:
    """The statements on the embedded queue's table (``LOCAL_QUEUE_SCHEMA``), both sides'."""

    # Producer: (queue, message_key, body, enqueued_ms, visible_ms).
    INSERT = (
        "INSERT INTO messages (queue, message_key, body, enqueued_ms, visible_ms)"
        " VALUES (?, ?, ?, ?, ?)"
    )
    # Producer: (queue, waiting, oldest enqueued_ms) of every stream holding messages.
    BACKLOG = "SELECT queue, COUNT(*), MIN(enqueued_ms) FROM messages GROUP BY queue"
    # Consumer: leasing (visible_ms, lease, id), committing and extending (… id, lease).
    LEASE = "UPDATE messages SET visible_ms=?, deliveries=deliveries+1, lease=? WHERE id=?"
    COMMIT = "DELETE FROM messages WHERE id=? AND lease=?"
    EXTEND = "UPDATE messages SET visible_ms=? WHERE id=? AND lease=?"

    @staticmethod
    def visible(queue_count: int) -> str:
        """Consumer: (id, body, deliveries) of the messages visible now, oldest first; takes
        the queue names, now (ms) and a limit."""
        marks = ",".join("?" * queue_count)
        return (
            f"SELECT id, body, deliveries FROM messages WHERE queue IN ({marks})"
            " AND visible_ms <= ? ORDER BY visible_ms, id LIMIT ?"
        )
