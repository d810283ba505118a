"""A Kafka queue lane whose group refuses its commits says so once, and once more when the
group takes them again: while commits are refused, everything finished since the last one
runs again when the partitions move, so the stall must show in the worker's log."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from aiokafka.errors import CommitFailedError

from worker_sdk.queues.kafka_lane import KafkaReceipt, QueueLane
from worker_sdk.queues.kafka_ledger import PartitionLedger


class _Consumer:
    """Refuses the first ``refusals`` commits, as a group that moved on does."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.committed: list[dict[Any, Any]] = []

    async def commit(self, offsets: dict[Any, Any]) -> None:
        if self.refusals:
            self.refusals -= 1
            raise CommitFailedError("the group has already rebalanced")
        self.committed.append(offsets)


async def test_refused_commits_are_said_once_and_their_end_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = _Consumer(refusals=2)
    lane = QueueLane("q", "workers.q", consumer, admin=None)
    ledger = lane.ledgers[("t", 0)] = PartitionLedger(1, None, "")
    caplog.set_level(logging.WARNING, logger="tikk.worker.kafka")
    for offset in range(3):
        ledger.hand_out(offset)
        await lane.commit([KafkaReceipt("q", "t", 0, offset, 1)])
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert "the group refused a commit" in said[0] and "run again" in said[0]
    assert "takes this worker's commits again" in said[1]
    assert len(consumer.committed) == 1
    assert [offset for offset, _ in consumer.committed[0].values()] == [3]
