"""Settings of a tikk deployment: backend URLs, shard count and input limits."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from tikk.buckets import DEFAULT_SHARD_COUNT
from tikk.model import RetryPolicy
from tikk.queue_contract import MAX_QUEUE_NAME_LENGTH
from tikk.quotas import NamespaceQuotas
from tikk.urls import redact

TEN_YEARS_MS = 10 * 366 * 24 * 3600 * 1000
# The longest duration any setting takes (a config file's, an environment variable's, a
# flag's); requests have their own limits below, none longer.
MAX_DURATION_MS = TEN_YEARS_MS
ONE_YEAR_MS = 366 * 24 * 3600 * 1000
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class Limits:
    """What the API accepts. Anything outside is INVALID_ARGUMENT, never silently trimmed."""

    max_payload_bytes: int = 256 * 1024
    max_id_length: int = 128
    max_queue_length: int = MAX_QUEUE_NAME_LENGTH
    max_handler_length: int = 256
    max_labels: int = 64
    # Characters of a label's key (A-Z a-z 0-9 . _ / -, starting alphanumeric) and value.
    max_label_key_length: int = 63
    max_label_value_length: int = 256
    # A worker's result (``server.api.result_fields``). Its run id and worker id are short
    # identifiers; its error and output are stored in the run history and shown in listings,
    # so each has a cap: a result over one is refused, never trimmed. The worker SDK trims an
    # error to fit and fails a run whose output is over the cap, so its results always fit.
    max_run_id_length: int = 128
    max_worker_id_length: int = 128
    max_error_type_length: int = 256
    max_error_message_length: int = 8 * 1024
    # A failed run's stack trace: shown on the console's task page and by ``tikk runs``.
    max_traceback_length: int = 16 * 1024
    max_output_bytes: int = 64 * 1024
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
    # Results in one ReportResultBatches message.
    max_result_batch: int = 5_000
    # What one delivery's token takes (``server.ops.results``; refused, not INVALID_ARGUMENT).
    # Runs a finished attempt records besides the one that finished it: duplicate deliveries
    # (at-least-once; the soak run saw about one per hundred tasks, and a crash rarely hands
    # one attempt out more than twice), with room for a few crashes around one attempt, while
    # a captured token buys no more than this many records.
    max_extra_runs: int = 8
    # How long after its attempt ended a token still takes a result: repeats of a report
    # whose acknowledgement was lost, and runs of duplicate deliveries (handed out again
    # after a lease of 60 s or a Kafka session timeout, then run). A running attempt's token
    # never runs out here: the worker renews its lease for as long as the handler runs.
    result_grace_ms: int = 3_600_000
    # No token is taken this long after its delivery was fired, before anything is read: the
    # Cassandra store keeps a task 30 days past its due time and the history a run 30 days,
    # so no later result could find what it reports on.
    max_delivery_age_ms: int = 30 * DAY_MS
    # Bytes of one request message (gRPC's receive limit): a larger one is RESOURCE_EXHAUSTED
    # before the server reads it. Never below what a task of the largest payload needs.
    max_request_bytes: int = 16 * 1024 * 1024
    # Listings: a page_size over this is INVALID_ARGUMENT, never trimmed; 0 asks the default.
    max_page_size: int = 1_000
    default_page_size: int = 100
    # History queries by time (runs of a queue, occurrences of a schedule): the span of one
    # call. A query without a start covers a default span back from its end.
    max_history_span_ms: int = 31 * DAY_MS
    # Backfills: the span of nominal instants, and the occurrences, of one call.
    max_backfill_span_ms: int = 366 * DAY_MS
    max_backfill_occurrences: int = 10_000
    default_retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def max_answer_bytes(self) -> int:
        """The largest answer a server sends (gRPC's send limit)."""
        return max(16 * 1024 * 1024, 4 * self.max_payload_bytes)


@dataclass(frozen=True)
class Deadlines:
    """Server-side bounds on every call, whatever deadline the caller set (or none): one
    slow backend cannot hold a process's calls. Over a bound a call ends UNAVAILABLE."""

    # A unary call, and each message of a stream (an import batch, a result batch).
    call_ms: int = 30_000
    # A stream whose client sends nothing for this long is closed (it holds a slot).
    stream_idle_ms: int = 300_000


@dataclass(frozen=True)
class QuotaSettings:
    """How per-namespace quotas (``tikk.store.quotas``) are applied."""

    # For namespaces without a quota of their own (None: unlimited).
    defaults: NamespaceQuotas = field(default_factory=NamespaceQuotas)
    # How long a server process trusts the quotas it read: a change applies within this.
    cache_ms: int = 3_000


@dataclass(frozen=True)
class DispatchSettings:
    """Timing of the dispatcher (``dispatcher.scanner`` says what each part does). Defaults
    suit the embedded store and a second-level SLA."""

    # Longest sleep between ticks when nothing is due sooner.
    poll_interval_ms: int = 100
    # How far ahead of now rows are read into memory.
    prefetch_ms: int = 2_000
    # How long before its due time a task is handed to its queue: the worker holds it and
    # starts it at its due instant by the server's clock (``worker_sdk.lead``), so the
    # pipeline's latency up to this much never lands on the start. A plain cancel of a task
    # already handed over is refused, so this is also how early cancels end. 0: at the due
    # instant. Below ``prefetch_ms`` (rows must be read before their lead begins). Off by
    # default for now: with 500 ms the median start came closer to due but the slowest
    # percent came later (README, "Timing and clock skew").
    lead_ms: int = 0
    # Re-read the current second and the prefetch window this often, to catch tasks created
    # already due (their lateness is at most about this).
    rescan_interval_ms: int = 250
    # A row written less than this long after its due time is still fired
    # (``dispatcher.scanner``); the cursor trails the clock by about this plus two seconds.
    # Set once for servers and dispatchers alike, by ``Settings.late_write_grace_ms``.
    late_write_grace_s: int = 5
    # How often the sweep confirms the seconds whose grace period has passed.
    sweep_interval_ms: int = 1_000
    # Rows per store read.
    scan_limit: int = 2_000
    # Schedules stepped per pass; the occurrences of one pass go out before the next.
    max_steps: int = 500
    # Upper bound on rows held in memory (catch-up after downtime proceeds in slices).
    max_held: int = 200_000
    # How often moved cursors are written to the store (all shards in one write).
    cursor_flush_interval_ms: int = 1_000
    # Wait after a backend failure before the next tick.
    error_backoff_ms: int = 500
    # A queue that refuses deliveries is retried after error_backoff_ms, doubling up to this.
    max_queue_backoff_ms: int = 10_000
    # A publish not confirmed within this counts as failed (a broker that stopped answering
    # must not stall every shard's tick); it may still have been stored: at-least-once.
    publish_timeout_ms: int = 10_000
    # How often the running totals of due-index reads are logged (INFO, ``tikk.dispatcher``):
    # the benchmark reads them to show that poll cost follows what is due, not what is stored.
    reads_log_interval_ms: int = 10_000
    # How often the queues' controls (paused, rate; ``tikk.queue_holds``) are read again: a
    # pause takes effect within about this.
    queue_control_refresh_ms: int = 1_000
    # Rows per second released from a queue's parked rows when it has no rate of its own
    # (resumed after a pause), per dispatcher.
    release_per_s: int = 1_000

    def __post_init__(self) -> None:
        if not 0 <= self.lead_ms < self.prefetch_ms:
            raise ValueError(
                f"lead_ms ({self.lead_ms}) must be at least 0 and below prefetch_ms "
                f"({self.prefetch_ms}): a task must be read before its lead begins"
            )


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
    # Host names (``name`` or ``name:port``) the HTTP listener answers besides its own
    # address and ``localhost``: a proxy's (``server.web.browser_guard``).
    http_allowed_hosts: tuple[str, ...] = ()


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
    # HOST:PORT of the HTTP listener (``/metrics``, ``/healthz``); empty: none.
    http: str = ""
    # How long a worker holds a message before it is handed to another worker.
    visibility_timeout_ms: int = 60_000
    # A due row written less than this long after its due time is still fired; the server
    # re-places rows it wrote later than half of it (see ``server.ops.late_writes``).
    late_write_grace_ms: int = 5_000
    # How long a process starting keeps trying backends that do not answer yet (a node
    # restarting, an election) before it exits (``server.start_patience``).
    start_patience_ms: int = 60_000
    limits: Limits = field(default_factory=Limits)
    deadlines: Deadlines = field(default_factory=Deadlines)
    dispatch: DispatchSettings = field(default_factory=DispatchSettings)
    quotas: QuotaSettings = field(default_factory=QuotaSettings)
    security: Security = field(default_factory=Security)

    def __repr__(self) -> str:
        # A URL from a config file may carry an inline password; a repr is what ends up in
        # logs and tracebacks, so it shows the URLs redacted.
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _URL_FIELDS:
            shown[name] = redact(shown[name])
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


_URL_FIELDS = ("store_url", "history_url", "queue_url", "ownership_url")


def embedded_urls(data_dir: str | Path) -> dict[str, str]:
    """The embedded default: store, history and queue as SQLite files under ``data_dir``."""
    base = Path(data_dir).resolve()
    return {
        "store_url": f"sqlite://{base / 'tikk.db'}",
        "history_url": f"sqlite://{base / 'history.db'}",
        "queue_url": f"local://{base / 'queue.db'}",
    }
