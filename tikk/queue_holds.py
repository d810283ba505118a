"""What an operator set on a queue: paused or not, how fast it may dispatch, and whether rows
held back too long are skipped. Domain values; the store keeps them
(``tikk.store.queue_holds``), the dispatcher applies them (``dispatcher.queue_gates``).

A row of a paused queue, or one over its rate, is *parked*: taken out of the due index's
flow into a listing of its queue and shard, its task still SCHEDULED at the same attempt and
due time. The shard's owner releases parked rows in due order at a bounded rate once the
queue may dispatch again, each keeping its due time, so its lateness is what it waited.
"""

from __future__ import annotations

from dataclasses import dataclass

from tikk.errors import InvalidArgument

# The error type of a task skipped because it waited in a held queue longer than the
# queue allows (``QueueControl.skip_older_than_ms``).
SKIPPED = "Skipped"
# Beyond this a rate is a typo: the dispatcher cannot publish a million a second anyway.
MAX_RATE_PER_S = 1_000_000.0


@dataclass(frozen=True)
class QueueControl:
    """One queue's operator settings; the default (not paused, no rate, skip nothing) is
    what a queue nobody touched has."""

    queue: str
    paused: bool = False
    # When it was last paused (0 if never): shown with the queue.
    paused_ms: int = 0
    # Most tasks dispatched per second over the whole queue; 0: no limit of its own.
    rate_per_s: float = 0.0
    # Parked rows whose due time is further back than this when they are released are
    # skipped (their task CANCELLED with error type ``SKIPPED``); 0: every one fires.
    skip_older_than_ms: int = 0
    updated_ms: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.rate_per_s <= MAX_RATE_PER_S:
            limit = f"{MAX_RATE_PER_S:,.0f}"
            raise InvalidArgument(
                "max_per_second", f"must be between 0 and {limit}, got {self.rate_per_s}"
            )
        if self.skip_older_than_ms < 0:
            raise InvalidArgument("skip_older_than", "must not be negative")

    @property
    def holds(self) -> bool:
        """Whether the queue's rows may be parked at all (paused or rate-limited)."""
        return self.paused or self.rate_per_s > 0

    def too_old(self, due_ms: int, now_ms: int) -> bool:
        """Whether a parked row due at ``due_ms`` is skipped when released at ``now_ms``."""
        return self.skip_older_than_ms > 0 and now_ms - due_ms > self.skip_older_than_ms
