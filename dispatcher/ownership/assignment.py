"""Which live dispatcher should own which shard: a pure function of the shard count and the
member ids, so every member computes the same answer from the same membership list.

The rule is *balanced rendezvous hashing*:

1. Quotas: with ``n`` shards and ``m`` members (ids sorted), the first ``n % m`` members get
   ``n // m + 1`` shards and the others ``n // m``; sizes differ by at most one.
2. Every (shard, member) pair gets a score, a stable 64-bit hash of both (BLAKE2b, never
   Python's per-process ``hash``).
3. Going through all pairs from the highest score down (ties by shard, then member), a shard
   goes to the member of the pair if the shard is still free and the member still has quota.

Every shard ends up with exactly one member: while a shard is free some member has quota
left, and the pair of the two is still ahead. Because a shard prefers the same members
whatever else is in the group, a joining member mostly takes shards from everyone a little
and a leaving member's shards are spread over the rest. Few shards move on a change (close to
``n / (m + 1)`` on a join, against about ``n / 2`` with contiguous ranges), so there are fewer
handovers and fewer duplicate deliveries around them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def assign(shard_count: int, members: Iterable[str]) -> dict[str, list[int]]:
    """Member id → its shards in ascending order, covering ``range(shard_count)`` exactly once.

    The order and duplicates of ``members`` do not matter. No members: an empty mapping (no
    shard has an owner). Cost: O(shard_count * members * log) per call. Raises ``ValueError``
    for a negative ``shard_count``.
    """
    if shard_count < 0:
        raise ValueError(f"shard_count must be >= 0, got {shard_count}")
    ids = sorted(set(members))
    if not ids:
        return {}
    quota = _quotas(shard_count, ids)
    owner: dict[int, str] = {}
    pairs = ((_score(s, m), s, m) for s in range(shard_count) for m in ids)
    for _, shard, member in sorted(pairs, key=lambda p: (-p[0], p[1], p[2])):
        if shard not in owner and quota[member]:
            owner[shard] = member
            quota[member] -= 1
    result: dict[str, list[int]] = {m: [] for m in ids}
    for shard in range(shard_count):
        result[owner[shard]].append(shard)
    return result


def _quotas(shard_count: int, sorted_ids: list[str]) -> dict[str, int]:
    base, extra = divmod(shard_count, len(sorted_ids))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(sorted_ids)}


def _score(shard: int, member: str) -> int:
    digest = hashlib.blake2b(f"{shard}/{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
