"""Backing off a ready queue that refuses deliveries, while the other queues' tasks go out.

A queue that failed is tried again after ``error_backoff_ms``, doubling with each failure in a
row up to ``max_backoff_ms``; its first success forgets the failures.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.shard_state import NEVER


@dataclass
class _Backoff:
    failures: int = 0
    retry_at_ms: int = NEVER


class QueueBackoffs:
    """When each queue that refused deliveries may be tried again."""

    def __init__(self, error_backoff_ms: int, max_backoff_ms: int) -> None:
        self._first_ms = error_backoff_ms
        self._max_ms = max_backoff_ms
        self._queues: dict[str, _Backoff] = {}

    def until(self, queue: str) -> int:
        """The instant ``queue`` may be tried again (long past if it is not backing off)."""
        backoff = self._queues.get(queue)
        return NEVER if backoff is None else backoff.retry_at_ms

    def failed(self, queue: str, now_ms: int) -> tuple[int, int]:
        """Record a failure of ``queue`` at ``now_ms``: how many in a row, and the delay
        before its next try."""
        backoff = self._queues.setdefault(queue, _Backoff())
        backoff.failures += 1
        delay = min(self._max_ms, self._first_ms * 2 ** (backoff.failures - 1))
        backoff.retry_at_ms = now_ms + delay
        return backoff.failures, delay

    def succeeded(self, queue: str) -> None:
        self._queues.pop(queue, None)
