"""What a dispatcher counts: read by its logs, its metrics and the tests."""

from __future__ import annotations

from dataclasses import dataclass, field


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
