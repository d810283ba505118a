"""Shard ownership: which shards a dispatcher may act on, each with a fencing epoch.

States, as the dispatcher sees them through ``owned()``:

* a shard is in ``owned()`` → this process is its one active owner and may dispatch it,
  presenting the epoch to the store when it moves the cursor;
* a shard drops out (lost, rebalanced, or the lease that outlives a dropped coordination
  connection ended before the session could expire) → stop acting on it at once; whatever
  was in flight is re-sent by the next owner from the cursor;
* the epoch of a shard changes → ownership was lost and regained; state is rebuilt.

Backends: ``SingleOwner`` (embedded: one process owns everything) and
``dispatcher.ownership.zookeeper.ZkOwnership`` (the live dispatchers divide the shards).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from tikk.errors import BackendUnavailable


class Ownership(Protocol):
    def owned(self) -> Mapping[int, int]:
        """Shard → fencing epoch of every shard this process owns right now. Cheap; called on
        every dispatcher tick. Never blocks."""
        ...

    async def ping(self) -> None:
        """Return if this member is connected to its coordination service now (a ZooKeeper
        session CONNECTED, whether or not it owns a shard yet); raise ``BackendUnavailable``
        naming the state otherwise (suspended, lost, stopped). Cheap: reads local state,
        asks the server nothing."""
        ...

    async def start(self) -> None:
        """Join the group of dispatchers and begin acquiring shards."""
        ...

    async def close(self) -> None:
        """Release every shard and leave; idempotent."""
        ...


class SingleOwner:
    """Owns every shard. Its epoch is fixed at start (pass the start time in milliseconds), so
    a newer process fences an older one that is still running against the same store."""

    def __init__(self, shard_count: int, epoch: int) -> None:
        self._owned = dict.fromkeys(range(shard_count), epoch)
        self._closed = False

    def owned(self) -> Mapping[int, int]:
        return self._owned

    async def start(self) -> None:
        return None

    async def ping(self) -> None:
        if self._closed:
            raise BackendUnavailable("the single owner is closed")

    async def close(self) -> None:
        self._owned = {}
        self._closed = True
