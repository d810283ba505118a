"""What a dispatcher counts: read by its logs, its metrics and the tests."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger("tikk.dispatcher")


@dataclass
class DispatchStats:
    """Counters for logs, metrics and tests."""

    published: int = 0
    skipped: int = 0
    schedule_steps: int = 0
    publish_failures: int = 0
    # Published although the task was already DISPATCHED: possible duplicates (a takeover
    # re-sending what was in flight, or a publish repeated after a failure).
    resent: int = 0
    # Rows found already handed off by an earlier owner, so not sent again.
    handed_off_skipped: int = 0
    # Attempts dead-lettered because no worker started them within their start timeout.
    expired: int = 0
    # Reads of the due index, and the rows they returned.
    store_reads: int = 0
    rows_read: int = 0
    lateness_ms: list[int] = field(default_factory=list)

    last_reads_log_ms: int = -(2**62)

    def log_reads(self, now_ms: int, interval_ms: int) -> None:
        """The running totals of due-index reads, at most once per ``interval_ms`` (0: now).
        Totals, not rates: a reader (the benchmark) takes the difference of any two lines,
        and the last one is written on close, so a window ending at a stop is covered."""
        if now_ms - self.last_reads_log_ms >= interval_ms:
            self.last_reads_log_ms = now_ms
            log.info("store reads at %d ms: %d reads, %d rows", now_ms, self.store_reads,
                     self.rows_read)  # fmt: skip
