"""Progress on one assigned partition of a Kafka queue: which offset its worker may commit.

Pure bookkeeping, no I/O (``worker_sdk.queues.kafka_lane`` does the I/O). Workers finish messages
out of order; Kafka keeps one offset per partition. The ledger notes what was handed out and
what is done, and the offset to commit is the oldest message not yet done (one past the newest,
when all are): it never passes an unfinished message and never moves back.

Commit metadata ``started:<offset>:<n>`` (``start_record``) says the message at that offset
was handed out n times: a message that kills every worker before it reports is counted across
restarts this way (see ``worker_sdk.queues.kafka``, "Poison messages").
"""

from __future__ import annotations

from collections import deque


def start_record(offset: int, count: int) -> str:
    """Commit metadata saying the message at ``offset`` was handed out ``count`` times."""
    return f"started:{offset}:{count}"


def recorded_starts(metadata: str, offset: int) -> int:
    """How often commit ``metadata`` says the message at ``offset`` was handed out (0 if it
    says nothing about that message)."""
    tag, _, rest = metadata.partition(":")
    at, _, count = rest.partition(":")
    if tag != "started" or at != str(offset) or not count.isdigit():
        return 0
    return int(count)


class PartitionLedger:
    """Progress on one assigned partition: pure bookkeeping, no I/O.

    Messages are handed out in offset order and finished in any order; ``target`` is the
    (offset, metadata) to commit next. ``committed``/``metadata`` describe what the group had
    committed when the partition was assigned.
    """

    def __init__(self, epoch: int, committed: int | None = None, metadata: str = "") -> None:
        self.epoch = epoch
        self._committed = (committed, metadata)
        # A restart resumes at the committed offset: how often was that message started?
        starts = 0 if committed is None else recorded_starts(metadata, committed)
        self._restarts = (committed, starts)
        self._outstanding: deque[int] = deque()  # handed out, not yet behind the commit point
        self._counts: dict[int, int] = {}  # offset of each outstanding message: delivery count
        self._done: set[int] = set()
        self._next: int | None = None  # one past the newest message finished in order

    @property
    def floor(self) -> int | None:
        """The group's commit point as known here: every message below it is done for good
        and must never be handed out again (None: not known)."""
        return self._committed[0]

    def learn(self, committed: int | None, metadata: str) -> None:
        """The group's commit, read after the ledger was made (before anything was handed
        out from it)."""
        self._committed = (committed, metadata)
        starts = 0 if committed is None else recorded_starts(metadata, committed)
        self._restarts = (committed, starts)

    def hand_out(self, offset: int) -> int:
        """Note the message at ``offset`` as handed out; returns its delivery count."""
        at, starts = self._restarts
        count = 1 + (starts if offset == at else 0)
        self._outstanding.append(offset)
        self._counts[offset] = count
        return count

    def finish(self, offset: int) -> bool:
        """Note the message at ``offset`` as done; False if it is not outstanding here."""
        if offset not in self._counts:
            return False
        self._done.add(offset)
        while self._outstanding and self._outstanding[0] in self._done:
            head = self._outstanding.popleft()
            self._done.discard(head)
            del self._counts[head]
            self._next = head + 1
        return True

    def target(self) -> tuple[int, str] | None:
        """What to commit now, or None if what is committed is still right (or would move the
        offset backwards)."""
        if self._outstanding:
            head = self._outstanding[0]
            wanted = (head, start_record(head, self._counts[head]))
        elif self._next is not None:
            wanted = (self._next, "")
        else:
            return None
        offset, metadata = self._committed
        if offset is not None and (wanted[0] < offset or wanted == (offset, metadata)):
            return None
        return wanted

    def mark_committed(self, offset: int, metadata: str) -> None:
        self._committed = (offset, metadata)

    def covers(self, offset: int) -> bool:
        """Whether the committed offset is past ``offset`` (its message is done for good)."""
        committed = self._committed[0]
        return committed is not None and committed > offset
