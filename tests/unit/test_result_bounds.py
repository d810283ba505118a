"""What one delivery's token buys, through the server's result recorder on the real embedded
store, queue and run history with a manual clock: a finished attempt records a bounded number
of further runs, and only for a grace period after it ended; a running attempt takes its
result however long it ran; a repeat adds nothing (not even a second dead-letter copy); and
every run is filed under the server's clock, whatever times the worker reported."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from history.sqlite import SqliteRunHistory
from server.ops.late_writes import LateWriteGuard
from server.ops.refusals import ResultRefused
from server.ops.results import ResultRecorder
from server.ops.start_timeouts import StartTimeouts
from tests.factories import T0, make_task
from tikk import delivery_codec
from tikk.clock import ManualClock
from tikk.delivery_tokens import DeliveryKeys, TokenRefused, new_keys
from tikk.errors import BackendUnavailable
from tikk.model import Delivery, ResultKind, RunQuery, RunRecord, RunReport, RunStatus, TaskState
from tikk.settings import DispatchSettings, Limits
from tikk.store.sqlite.tasks import SqliteTaskStore
from tikk.telemetry import Telemetry
from worker_sdk.queues.consumer import Message
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 2
LIMITS = Limits(max_extra_runs=3, result_grace_ms=60_000, max_delivery_age_ms=86_400_000)
YEAR_9999_MS = 253_402_300_799_000


@dataclass
class Counted(Telemetry):
    """The counts the recorder reports."""

    refused: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)

    def result_refused(self, reason: str) -> None:
        self.refused.append(reason)

    def duplicate_run(self, queue: str) -> None:
        self.duplicates.append(queue)


@dataclass
class Rig:
    store: SqliteTaskStore
    history: SqliteRunHistory
    queue: LocalReadyQueue
    results: ResultRecorder
    keys: DeliveryKeys
    clock: ManualClock
    counted: Counted
    tmp: Path

    async def delivered(self, task_id: str, max_attempts: int = 3) -> Delivery:
        """A task created, dispatched by a real dispatcher, and its delivery as a worker
        reads it off the queue (token included)."""
        await self.store.create(make_task(task_id, max_attempts=max_attempts, shard_count=SHARDS))
        expiry = StartTimeouts(self.store, self.history, self.queue)
        dispatcher = Dispatcher(
            self.store, self.queue, SingleOwner(SHARDS, 1), self.clock,
            settings=DispatchSettings(cursor_flush_interval_ms=0), expiry=expiry, keys=self.keys,
        )  # fmt: skip
        for _ in range(150):
            self.clock.advance(100)
            await dispatcher.tick(self.clock.now_ms())
        messages = await self.fetch("q")
        [delivery] = [delivery_codec.from_proto(m.delivery, SHARDS) for m in messages]
        assert delivery.entry.task_id == task_id and delivery.token
        return delivery

    async def fetch(self, queue: str) -> list[Message]:
        consumer = LocalQueueConsumer(str(self.tmp / "queue.db"), [queue], 60_000)
        await consumer.start()
        try:
            messages = await consumer.fetch(100)
            for m in messages:
                await consumer.commit(m)
            return list(messages)
        finally:
            await consumer.close()

    async def runs(self, task_id: str) -> list[str]:
        page = await self.history.list_for_task("default", task_id, 100, "")
        return sorted(r.run_id for r in page.items)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    history = SqliteRunHistory(str(tmp_path / "history.db"))
    await store.start()
    await history.start()
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    clock, keys, counted = ManualClock(T0), new_keys(), Counted()
    results = ResultRecorder(
        store, history, queue, clock, guard=LateWriteGuard(store, clock, grace_ms=5_000),
        expiry=StartTimeouts(store, history, queue), keys=keys, limits=LIMITS,
        rng=random.Random(1), telemetry=counted,
    )  # fmt: skip
    await queue.start()
    yield Rig(store, history, queue, results, keys, clock, counted, tmp_path)
    await queue.close()
    await history.close()
    await store.close()


def report(
    delivery: Delivery, run_id: str, kind: ResultKind = ResultKind.SUCCEEDED, **fields: object
) -> RunReport:
    base = RunReport(run_id, delivery, kind, delivery.entry.due_ms, delivery.entry.due_ms + 5, "w")
    return replace(base, **fields)  # type: ignore[arg-type]


async def outcome(rig: Rig, r: RunReport) -> str:
    """ "ok", or the reason the report was refused."""
    try:
        await rig.results.record(r)
    except (ResultRefused, TokenRefused) as exc:
        return exc.reason
    return "ok"


async def test_a_finished_attempt_records_a_bounded_number_of_further_runs(rig: Rig) -> None:
    """One token replayed under new run ids, all at once (one coalesced batch) and then one
    by one: the attempt keeps the run that finished it and ``max_extra_runs`` more."""
    d = await rig.delivered("t")
    assert await outcome(rig, report(d, "first")) == "ok"
    burst = await asyncio.gather(*(outcome(rig, report(d, f"dup{i}")) for i in range(6)))
    later = [await outcome(rig, report(d, f"late{i}")) for i in range(3)]
    assert sorted(burst + later) == ["ok"] * 3 + ["too_many_runs"] * 6
    runs = await rig.runs("t")
    assert len(runs) == 1 + LIMITS.max_extra_runs and "first" in runs
    assert rig.counted.duplicates == ["q"] * 3
    assert rig.counted.refused == ["too_many_runs"] * 6
    assert (await rig.store.get("default", "t")).state is TaskState.SUCCEEDED


async def test_the_same_run_reported_again_is_acknowledged_under_its_first_time(
    rig: Rig,
) -> None:
    d = await rig.delivered("t")
    await rig.results.record(report(d, "r1"))
    first = await rig.history.get("default", "r1")
    rig.clock.advance(30_000)  # within the grace
    for _ in range(3):
        assert await outcome(rig, report(d, "r1")) == "ok"
    assert await rig.runs("t") == ["r1"]
    assert await rig.history.get("default", "r1") == first
    assert rig.counted.duplicates == [] and rig.counted.refused == []


async def test_an_ended_attempt_takes_nothing_once_its_grace_ran_out(rig: Rig) -> None:
    d = await rig.delivered("t")
    await rig.results.record(report(d, "r1"))
    rig.clock.advance(LIMITS.result_grace_ms + 1)
    assert await outcome(rig, report(d, "r2")) == "token_expired"  # a late duplicate
    assert await outcome(rig, report(d, "r1")) == "token_expired"  # a late repeat
    assert await rig.runs("t") == ["r1"]
    assert rig.counted.refused == ["token_expired"] * 2


async def test_a_running_attempt_takes_its_result_however_long_it_ran(rig: Rig) -> None:
    """No heartbeat reaches the server while a handler runs (the worker renews its lease
    with the queue), so a long run's token must still be taken when it ends."""
    d = await rig.delivered("t")
    rig.clock.advance(50 * LIMITS.result_grace_ms)
    assert await outcome(rig, report(d, "long")) == "ok"
    assert (await rig.store.get("default", "t")).state is TaskState.SUCCEEDED


async def test_a_token_older_than_the_delivery_age_is_refused_before_anything(
    rig: Rig,
) -> None:
    d = await rig.delivered("t")
    rig.clock.advance(LIMITS.max_delivery_age_ms + 1)
    assert await outcome(rig, report(d, "ancient")) == "token_expired"
    assert (await rig.store.get("default", "t")).state is TaskState.DISPATCHED
    assert await rig.runs("t") == []


async def test_a_failure_reported_again_adds_no_record_and_no_second_dead_letter_copy(
    rig: Rig,
) -> None:
    d = await rig.delivered("t", max_attempts=1)
    failed = report(d, "r1", ResultKind.FAILED, error_type="Boom", error_message="real")
    await rig.results.record(failed)
    assert (await rig.store.get("default", "t")).state is TaskState.DEAD_LETTERED
    assert len(await rig.fetch("q.dlq")) == 1
    rig.clock.advance(1_000)
    chosen = replace(failed, error_message="chosen by the sender")
    assert await outcome(rig, chosen) == "ok"  # a repeat: acknowledged
    assert await rig.fetch("q.dlq") == []
    assert (await rig.history.get("default", "r1")).error_message == "real"
    # Another run's failure of the attempt that moved on is refused, as before.
    assert await outcome(rig, report(d, "r2", ResultKind.FAILED)) == "not_dispatched"
    assert await rig.runs("t") == ["r1"]


async def test_a_run_is_filed_under_the_servers_clock(rig: Rig) -> None:
    """A worker that stamps its run in year 9999 (or at 0) does not hide it from a query of
    the last hour: the history files it under the time the server recorded it."""
    for task_id, finished in (("far", YEAR_9999_MS), ("zero", 0)):
        d = await rig.delivered(task_id, max_attempts=1)
        failed = report(d, task_id, ResultKind.FAILED, started_ms=0, finished_ms=finished)
        await rig.results.record(failed)
        run = await rig.history.get("default", task_id)
        assert (run.finished_ms, run.recorded_ms) == (finished, rig.clock.now_ms())
    now = rig.clock.now_ms()
    hour = RunQuery("default", "q", now - 3_600_000, now + 1, RunStatus.DEAD_LETTERED)
    found = await rig.history.list_by_queue(hour, 10, "")
    assert sorted(r.run_id for r in found.items) == ["far", "zero"]


async def test_a_success_not_applied_fails_alone_not_the_lot_written_with_it(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Successes arriving together are written as one lot. One the store did not apply (here
    another run of an attempt that already succeeded) is looked into after the lot: a store
    failure while doing so fails that report only."""
    done, fresh = await rig.delivered("done"), await rig.delivered("fresh")
    await rig.results.record(report(done, "first"))
    real_get = rig.history.get

    async def failing_get(namespace: str, run_id: str) -> RunRecord:
        if run_id == "again":
            raise BackendUnavailable("history: read timed out")
        return await real_get(namespace, run_id)

    monkeypatch.setattr(rig.history, "get", failing_get)

    async def kind(r: RunReport) -> str:
        try:
            await rig.results.record(r)
        except BackendUnavailable:
            return "unavailable"
        return "ok"

    outcomes = await asyncio.gather(kind(report(done, "again")), kind(report(fresh, "f1")))
    assert list(outcomes) == ["unavailable", "ok"]
    assert (await rig.store.get("default", "fresh")).state is TaskState.SUCCEEDED
    assert await rig.runs("fresh") == ["f1"]
