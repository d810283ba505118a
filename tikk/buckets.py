"""Shards and time buckets: where a task's due-index row lives.

The due index is partitioned by (shard, minute of due time) and clustered by (second, task
key). The exact due instant is kept in milliseconds next to it, so the dispatcher fires on the
millisecond while scans work on whole seconds.
"""

from __future__ import annotations

import hashlib

DEFAULT_SHARD_COUNT = 256


def shard_of(namespace: str, task_id: str, shard_count: int) -> int:
    """Stable shard of a task: the same on every process, host and Python version.

    Python's ``hash()`` is salted per process, so a digest is used instead.
    """
    digest = hashlib.blake2b(f"{namespace}\x00{task_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shard_count


def task_key(namespace: str, task_id: str) -> str:
    """The clustering key of a task inside a bucket: unique across namespaces."""
    return f"{namespace}/{task_id}"


def second_of(ms: int) -> int:
    """The Unix second that contains instant ``ms`` (floor, also for negative values)."""
    return ms // 1000


def minute_of_second(second: int) -> int:
    """The bucket (Unix minute) that contains Unix second ``second``."""
    return second // 60


def minutes_between(first_second: int, last_second: int) -> range:
    """Every minute bucket that holds a second in [first_second, last_second]."""
    return range(minute_of_second(first_second), minute_of_second(last_second) + 1)
