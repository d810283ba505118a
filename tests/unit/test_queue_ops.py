"""QueueOps (server/ops/queues.py) and the UpdateQueue request's checks, on the embedded
store and queue: a change keeps what it does not name, a pause keeps the time it began, a
queue with settings is listed with what it holds, and bad input names its field."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration

from dispatcher.ready_queue.local import LocalReadyQueue
from server.api.queues import queue_change
from server.ops.queues import QueueChange, QueueOps
from tests.factories import T0
from tikk.clock import ManualClock
from tikk.errors import InvalidArgument
from tikk.model import DueEntry
from tikk.settings import Limits
from tikk.store.sqlite.queue_holds import SqliteQueueHoldStore
from tikk.v1 import tasks_pb2


@dataclass
class Parts:
    ops: QueueOps
    holds: SqliteQueueHoldStore
    clock: ManualClock


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    holds = SqliteQueueHoldStore(str(tmp_path / "tikk.db"))
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    await holds.start()
    await queue.start()
    clock = ManualClock(T0)
    yield Parts(QueueOps(queue, holds, clock), holds, clock)
    await queue.close()
    await holds.close()


async def test_a_change_keeps_what_it_does_not_name(parts: Parts) -> None:
    paused = await parts.ops.update("email", QueueChange(paused=True, skip_older_than_ms=60_000))
    assert (paused.control.paused, paused.control.paused_ms) == (True, T0)
    parts.clock.advance(5_000)
    limited = await parts.ops.update("email", QueueChange(rate_per_s=2.5))
    c = limited.control
    assert (c.paused, c.paused_ms, c.rate_per_s, c.skip_older_than_ms) == (True, T0, 2.5, 60_000)
    parts.clock.advance(5_000)
    again = await parts.ops.update("email", QueueChange(paused=True))
    assert again.control.paused_ms == T0  # still the pause that began first
    resumed = await parts.ops.update("email", QueueChange(paused=False, skip_older_than_ms=0))
    assert (resumed.control.paused, resumed.control.skip_older_than_ms) == (False, 0)
    with pytest.raises(InvalidArgument, match="nothing to change"):
        await parts.ops.update("email", QueueChange())


async def test_a_queue_with_settings_is_listed_with_what_it_holds(parts: Parts) -> None:
    await parts.ops.update("sms", QueueChange(paused=True))
    rows = [DueEntry(shard=s, due_ms=T0 + s, namespace="ns", task_id=f"t{s}", attempt=1,
                     queue="sms", handler="h", payload=b"") for s in range(3)]  # fmt: skip
    await parts.holds.park(rows)
    page = await parts.ops.queues(10, "")
    assert [(q.backlog.queue, q.control.paused, q.held) for q in page.items] == [("sms", True, 3)]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (tasks_pb2.UpdateQueueRequest(name="", paused=True), "name"),
        (tasks_pb2.UpdateQueueRequest(name="q", max_per_second=-1), "max_per_second"),
        (tasks_pb2.UpdateQueueRequest(name="q", max_per_second=math.nan), "max_per_second"),
        (tasks_pb2.UpdateQueueRequest(name="q", skip_older_than=Duration(seconds=-5)),
         "skip_older_than"),
    ],
)  # fmt: skip
def test_bad_input_names_its_field(request_: tasks_pb2.UpdateQueueRequest, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        queue_change(request_, Limits())
    assert caught.value.field == field


def test_a_request_sets_only_the_fields_it_carries() -> None:
    request = tasks_pb2.UpdateQueueRequest(name="q", skip_older_than=Duration(seconds=90))
    assert queue_change(request, Limits()) == ("q", QueueChange(skip_older_than_ms=90_000))
