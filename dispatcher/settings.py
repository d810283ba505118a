"""The dispatcher's timing (see ``dispatcher.scanner`` for what each part does)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DispatchSettings:
    """Timing of the dispatcher. Defaults suit the embedded store and a second-level SLA."""

    # Longest sleep between ticks when nothing is due sooner.
    poll_interval_ms: int = 100
    # How far ahead of now rows are read into memory.
    prefetch_ms: int = 2_000
    # Re-read the current second and the prefetch window this often, to catch tasks created
    # already due (their lateness is at most about this).
    rescan_interval_ms: int = 250
    # A row written less than this long after its due time is still fired (see the module
    # docstring); the cursor trails the clock by about this plus two seconds.
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
