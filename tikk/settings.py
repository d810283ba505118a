"""Settings of a tikk deployment: backend URLs, shard count and input limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tikk.buckets import DEFAULT_SHARD_COUNT
from tikk.model import RetryPolicy
from tikk.queue_contract import MAX_QUEUE_NAME_LENGTH

TEN_YEARS_MS = 10 * 366 * 24 * 3600 * 1000
ONE_YEAR_MS = 366 * 24 * 3600 * 1000


@dataclass(frozen=True)
class Limits:
    """What the API accepts. Anything outside is INVALID_ARGUMENT, never silently trimmed."""

    max_payload_bytes: int = 256 * 1024
    max_id_length: int = 128
    max_queue_length: int = MAX_QUEUE_NAME_LENGTH
    max_handler_length: int = 256
    max_labels: int = 64
    max_label_value_length: int = 256
    max_schedule_ahead_ms: int = TEN_YEARS_MS
    max_backoff_ms: int = ONE_YEAR_MS
    max_attempts: int = 1000
    # Recurring schedules: no two fires closer than this, and at most this many a day.
    min_schedule_interval_ms: int = 1_000
    max_fires_per_day: int = 86_400
    max_preview: int = 1_000
    # Bulk loads: CreateTasks answers a whole stream with one message, so it is capped; an
    # ImportTasks batch is answered by one message too, and a stream holds a few in flight.
    max_create_tasks_per_stream: int = 100_000
    max_import_batch: int = 5_000
    import_window: int = 4
    default_retry: RetryPolicy = field(default_factory=RetryPolicy)


@dataclass(frozen=True)
class Tls:
    """The server's certificate and key (PEM files); with ``client_ca_file`` the server asks
    for a client certificate chaining to it (mTLS), whose subject then identifies the caller."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""


@dataclass(frozen=True)
class Security:
    """How the API is protected. The default (nothing) suits the embedded server on loopback;
    a non-loopback ``listen`` needs TLS and ``auth``, or ``insecure`` saying it is meant."""

    tls: Tls | None = None
    # Callers must present a credential (bearer token, or a client certificate mapped to one).
    auth: bool = False
    # Serve a non-loopback address without TLS or authentication anyway.
    insecure: bool = False
    # The keys that sign and check delivery tokens (shared by servers and dispatchers).
    delivery_keys_file: str = ""


@dataclass(frozen=True)
class Settings:
    """Where the backends live (``sqlite://``, ``local://`` embedded; ``cassandra://``,
    ``kafka://``, ``zk://`` production) and how the API behaves."""

    store_url: str
    history_url: str
    queue_url: str
    # Empty: this process owns every shard (embedded). ``zk://hosts/chroot``: ZooKeeper.
    ownership_url: str = ""
    # A dispatcher whose ZooKeeper session is silent this long loses its shards to others.
    ownership_session_timeout_ms: int = 10_000
    shard_count: int = DEFAULT_SHARD_COUNT
    listen: str = "127.0.0.1:7070"
    # How long a worker holds a message before it is handed to another worker.
    visibility_timeout_ms: int = 60_000
    # A due row written less than this long after its due time is still fired; the server
    # re-places rows it wrote later than half of it (see ``server.late_writes``).
    late_write_grace_ms: int = 5_000
    limits: Limits = field(default_factory=Limits)
    security: Security = field(default_factory=Security)


def embedded_urls(data_dir: str | Path) -> dict[str, str]:
    """The embedded default: store, history and queue as SQLite files under ``data_dir``."""
    base = Path(data_dir).resolve()
    return {
        "store_url": f"sqlite://{base / 'tikk.db'}",
        "history_url": f"sqlite://{base / 'history.db'}",
        "queue_url": f"local://{base / 'queue.db'}",
    }
