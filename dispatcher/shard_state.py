"""What a dispatcher knows of one shard it owns: its cursor, how far the sweep has read, and
the rows it has seen after the cursor (see ``dispatcher.scanner`` for the rules)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tikk.buckets import second_of
from tikk.model import Cursor, DueEntry
from tikk.store.tasks import TaskStore
from tikk.telemetry import ShardGauge

log = logging.getLogger("tikk.dispatcher")

# An instant before any other: "never" for the times of the last rescan and sweep.
NEVER = -(2**62)

RowKey = tuple[str, int, int]


def row_key(e: DueEntry) -> RowKey:
    """A row's identity: a retry (next attempt) or a re-drive (new due time) is a new row."""
    return (e.key, e.attempt, e.due_ms)


@dataclass
class ShardState:
    epoch: int
    cursor: int
    # Every second <= swept was read by a read that began after the second's grace period.
    swept: int
    # Where the sweep continues (a position after which rows are read).
    sweep_from: tuple[int, str]
    # Resume position of the forward scan.
    scan_from: tuple[int, str]
    # Row identity → second of rows seen after the cursor (held, in flight or sent).
    seen: dict[RowKey, int] = field(default_factory=dict)
    # Same keys for rows not yet acknowledged by the queue.
    unacked: dict[RowKey, int] = field(default_factory=dict)
    last_rescan_ms: int = NEVER
    last_sweep_ms: int = NEVER
    flushed_cursor: int = 0

    @classmethod
    def at(cls, cursor: Cursor, epoch: int) -> ShardState:
        """A shard taken over at its stored cursor."""
        after = (cursor.second + 1, "")
        return cls(
            epoch=epoch, cursor=cursor.second, swept=cursor.second, sweep_from=after,
            scan_from=after, flushed_cursor=cursor.second,
        )  # fmt: skip

    def advance(self) -> None:
        """Move the cursor to the last swept second, but never past a row the queue has not
        acknowledged; forget the rows it passed."""
        limit = self.swept
        if self.unacked:
            limit = min(limit, min(self.unacked.values()) - 1)
        if limit > self.cursor:
            self.cursor = limit
            self.seen = {k: sec for k, sec in self.seen.items() if sec > limit}

    def backlog(self, now_ms: int) -> int:
        """Rows due by ``now_ms`` that the queue has not acknowledged."""
        return sum(1 for key in self.unacked if key[2] <= now_ms)


def shard_gauges(shards: dict[int, ShardState], now_ms: int) -> dict[int, ShardGauge]:
    """What the metrics show of each owned shard: its backlog and how far its cursor trails."""
    return {
        shard: ShardGauge(
            backlog=st.backlog(now_ms), cursor_lag_s=max(0, second_of(now_ms) - st.cursor)
        )
        for shard, st in shards.items()
    }


async def write_cursors(
    store: TaskStore, shards: dict[int, ShardState], fenced: dict[int, int]
) -> bool:
    """Persist the cursor of every owned shard that moved, in one write (cheap even when it is
    a consensus round). A shard whose epoch the store refused was taken over by a newer owner:
    it leaves ``shards`` and its epoch goes into ``fenced``, so it is not taken again at that
    epoch. Returns whether anything was written."""
    moves = {
        shard: Cursor(st.cursor, st.epoch)
        for shard, st in shards.items()
        if st.cursor > st.flushed_cursor
    }
    if not moves:
        return False
    refused = await store.advance_cursors(moves)
    if refused:
        log.warning("%d shard(s) taken over by a newer owner; dropping them", len(refused))
    for shard, move in moves.items():
        if shard in refused:
            fenced[shard] = move.epoch
            del shards[shard]
        else:
            shards[shard].flushed_cursor = move.second
    return True
