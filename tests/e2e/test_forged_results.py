"""Results only from real deliveries: forged ``ReportResults`` against a real server and store.

The server (``serve``: gRPC on a loopback port, the SQLite or the Cassandra store and run
history, a local queue, its dispatcher) runs
in the test's process, so the test reads real deliveries off the ready queue like a worker,
alters them as a forger would, and checks that each forgery is refused with the right code
and leaves the task and its run history as they were. A real worker's run still succeeds, and
a worker handed a forged message drops it instead of reporting it forever.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from server.runtime import serve
from server.wiring import migrate
from tests.contract.cassandra_keyspace import REPLICATION
from tests.services import CASSANDRA, require, with_login
from tests.waiting import eventually_async
from tests.worker_server import free_port
from tikk import delivery_codec
from tikk.delivery_tokens import load_keys, new_keys, save_keys
from tikk.drivers.cassandra import CassandraConfig, CassandraSession
from tikk.settings import Security, Settings, embedded_urls
from tikk.v1 import (
    history_pb2,
    history_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from worker_sdk import Worker
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 8
OK = grpc.StatusCode.OK.value[0]
DENIED = grpc.StatusCode.PERMISSION_DENIED.value[0]
NOT_CURRENT = grpc.StatusCode.FAILED_PRECONDITION.value[0]


@dataclass
class Rig:
    tmp: Path
    address: str
    tasks: tasks_pb2_grpc.TaskServiceStub
    history: history_pb2_grpc.HistoryServiceStub
    worker: worker_pb2_grpc.WorkerServiceStub
    consumer: LocalQueueConsumer
    keys_file: Path
    taken: dict[str, worker_pb2.Delivery] = field(default_factory=dict)
    sent: dict[str, worker_pb2.RunResult] = field(default_factory=dict)

    async def create(self, queue: str = "q", *, delay_s: int = 0, **retry: int) -> str:
        task_id = uuid.uuid4().hex
        req = tasks_pb2.CreateTaskRequest(task_id=task_id, queue=queue, handler="h")
        req.payload = b"secret-payload"
        if delay_s:
            req.delay.FromSeconds(delay_s)
        if retry:
            req.retry_policy.max_attempts = retry["max_attempts"]
            req.retry_policy.initial_backoff.FromSeconds(retry["backoff_s"])
        await self.tasks.CreateTask(req, timeout=10)
        return task_id

    async def take(self, task_id: str) -> worker_pb2.Delivery:
        """The delivery of ``task_id`` as the dispatcher published it (committed off the queue)."""

        async def arrived() -> bool:
            for message in await self.consumer.fetch(16):
                await self.consumer.commit(message)
                self.taken[message.delivery.task_id] = message.delivery
            return task_id in self.taken

        if task_id not in self.taken:
            await eventually_async(arrived, 30, every_s=0.05, what=f"task {task_id} dispatched")
        return self.taken[task_id]

    async def report(
        self, delivery: worker_pb2.Delivery, kind: worker_pb2.ResultKind, run_id: str = ""
    ) -> worker_pb2.ResultAck:
        result = worker_pb2.RunResult(
            run_id=run_id or uuid.uuid4().hex, delivery=delivery, kind=kind, worker_id="forger"
        )
        # A report repeated under one run id is the same message, as a worker sends it again.
        result = self.sent.setdefault(result.run_id, result)
        result.start_time.FromMilliseconds(delivery.due_time.ToMilliseconds() + 10)
        result.finish_time.FromMilliseconds(delivery.due_time.ToMilliseconds() + 20)
        if kind in (worker_pb2.RESULT_KIND_FAILED, worker_pb2.RESULT_KIND_FAILED_PERMANENTLY):
            result.error_type, result.error_message = "Boom", "failed"
        call = self.worker.ReportResultBatches(timeout=20)
        await call.write(worker_pb2.RunResultBatch(results=[result]))
        answer = await call.read()
        await call.done_writing()
        [ack] = answer.acks
        assert isinstance(ack, worker_pb2.ResultAck)
        return ack

    async def dispatched(self, task_id: str) -> None:
        async def reached() -> bool:
            return (await self.state(task_id))[0] == tasks_pb2.TASK_STATE_DISPATCHED

        await eventually_async(reached, 30, every_s=0.05, what=f"task {task_id} dispatched")

    async def state(self, task_id: str) -> tuple[int, int, int, list[str]]:
        """What a forged result must not change: state, attempt, due time, and the runs."""
        t = await self.tasks.GetTask(tasks_pb2.GetTaskRequest(task_id=task_id), timeout=10)
        runs = await self.history.ListTaskRuns(
            history_pb2.ListTaskRunsRequest(task_id=task_id, page_size=100), timeout=10
        )
        due = t.due_time.ToMilliseconds()
        return t.state, t.attempt, due, sorted(r.run_id for r in runs.runs)


class Server:
    """``serve`` (API and dispatcher) on a fixed loopback port, restartable: a server reads
    its keys file at start."""

    def __init__(self, tmp: Path, store_url: str, history_url: str) -> None:
        self.port = free_port()
        self.settings = Settings(
            store_url, history_url, embedded_urls(tmp)["queue_url"],
            shard_count=SHARDS, listen=f"127.0.0.1:{self.port}",
            security=Security(delivery_keys_file=str(tmp / "delivery-keys")),
        )  # fmt: skip
        self._stop = asyncio.Event()
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._stop = asyncio.Event()
        bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._serving = asyncio.create_task(
            serve(
                self.settings,
                self._stop,
                dispatcher=True,
                on_ready=lambda at: bound.set_result(at.port),
            )
        )
        await asyncio.wait_for(bound, 30)

    async def stop(self) -> None:
        self._stop.set()
        if self._serving is not None:
            await asyncio.wait_for(self._serving, 30)


@pytest.fixture(params=["sqlite", "cassandra"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Task store and run history URLs: embedded, or a fresh keyspace on the real Cassandra
    (the queue stays the local file, which the test reads like a worker)."""
    if request.param == "sqlite":
        urls = embedded_urls(tmp_path)
        yield urls["store_url"], urls["history_url"]
        return
    keyspace = f"tikk_tokens_{uuid.uuid4().hex[:10]}"
    url = with_login(f"cassandra://{require('cassandra', CASSANDRA)}/{keyspace}")
    settings = Settings(url, url, "local://unused.db", shard_count=SHARDS)
    migrate(settings, REPLICATION, int(time.time() * 1000))
    yield url, url
    session = CassandraSession(CassandraConfig.from_url(url))
    session.connect()
    # Schema changes are slow on a busy node: give the drop time rather than fail the test.
    session.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
    session.shutdown()


@pytest.fixture
async def server(tmp_path: Path, stores: tuple[str, str]) -> AsyncIterator[Server]:
    s = Server(tmp_path, *stores)
    await s.start()
    yield s
    await s.stop()


@pytest.fixture
async def rig(tmp_path: Path, server: Server) -> AsyncIterator[Rig]:
    queue_file = server.settings.queue_url.removeprefix("local://")
    consumer = LocalQueueConsumer(queue_file, ["q", "other"], 60_000)
    await consumer.start()
    address = f"127.0.0.1:{server.port}"
    async with grpc.aio.insecure_channel(address) as ch:
        yield Rig(
            tmp_path, address, tasks_pb2_grpc.TaskServiceStub(ch),
            history_pb2_grpc.HistoryServiceStub(ch), worker_pb2_grpc.WorkerServiceStub(ch),
            consumer, tmp_path / "delivery-keys",
        )  # fmt: skip
    await consumer.close()


def sign(rig: Rig, d: worker_pb2.Delivery) -> worker_pb2.Delivery:
    """``d`` with a valid token made with the deployment's own key (a leaked or old token)."""
    delivery = delivery_codec.from_proto(d, SHARDS)
    signed = worker_pb2.Delivery()
    signed.CopyFrom(d)
    signed.token = load_keys(rig.keys_file).sign(delivery)
    return signed


def altered(d: worker_pb2.Delivery, **fields: object) -> worker_pb2.Delivery:
    forged = worker_pb2.Delivery()
    forged.CopyFrom(d)
    for name, value in fields.items():
        setattr(forged, name, value)
    return forged


async def test_forged_results_are_refused_and_change_nothing(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tikk.server")
    task_id, other_id = await rig.create(), await rig.create()
    real, other = await rig.take(task_id), await rig.take(other_id)
    foreign_id = await rig.create("other")
    foreign = await rig.take(foreign_id)
    before = {t: await rig.state(t) for t in (task_id, other_id, foreign_id)}
    assert before[task_id][0] == tasks_pb2.TASK_STATE_DISPATCHED

    flipped = real.token[:-2] + ("AA" if not real.token.endswith("AA") else "BB")
    forgeries = {
        "wrong token": altered(real, token=flipped),
        "no token": altered(real, token=""),
        "changed attempt": altered(real, attempt=real.attempt + 1),
        "token of another task": altered(real, token=other.token),
        "another queue relabelled": altered(foreign, queue="q"),
        "changed payload": altered(real, payload=b"other"),
    }
    for name, forged in forgeries.items():
        for kind in (worker_pb2.RESULT_KIND_SUCCEEDED, worker_pb2.RESULT_KIND_FAILED_PERMANENTLY):
            ack = await rig.report(forged, kind)
            assert ack.code == DENIED, (name, ack)
            assert "delivery token" in ack.message, name
        started = await rig.report(forged, worker_pb2.RESULT_KIND_STARTED)
        assert started.code == DENIED, (name, started)
    assert {t: await rig.state(t) for t in before} == before
    logged = caplog.text
    assert "refused (mismatch)" in logged and "refused (missing)" in logged
    for secret in (real.token, other.token, flipped, "secret-payload"):
        assert secret not in logged


async def test_a_dispatcher_with_other_keys_is_refused_naming_the_key(rig: Rig) -> None:
    """Processes that disagree on the keys file hear so (retriable: the run is real, and the
    worker keeps it until the servers have the key), and nothing changes meanwhile."""
    task_id = await rig.create()
    real = await rig.take(task_id)
    before = await rig.state(task_id)
    stranger = new_keys()
    forged = altered(real, token=stranger.sign(delivery_codec.from_proto(real, SHARDS)))
    ack = await rig.report(forged, worker_pb2.RESULT_KIND_SUCCEEDED)
    assert ack.code == grpc.StatusCode.UNAVAILABLE.value[0], ack
    assert stranger.current in ack.message and "delivery keys file" in ack.message
    assert (await rig.state(task_id)) == before
    assert (await rig.report(real, worker_pb2.RESULT_KIND_SUCCEEDED)).code == OK


async def test_a_task_not_dispatched_takes_no_result_even_with_a_valid_token(rig: Rig) -> None:
    task_id = await rig.create(delay_s=3600)
    before = await rig.state(task_id)
    assert before[0] == tasks_pb2.TASK_STATE_SCHEDULED
    forged = worker_pb2.Delivery(
        namespace="default", task_id=task_id, queue="q", handler="h", attempt=1,
        max_attempts=before[1], payload=b"secret-payload",
    )  # fmt: skip
    forged.due_time.FromMilliseconds(before[2])
    forged.fired_time.FromMilliseconds(int(time.time() * 1000))  # a young token
    forged = sign(rig, forged)
    for kind in (worker_pb2.RESULT_KIND_SUCCEEDED, worker_pb2.RESULT_KIND_FAILED):
        ack = await rig.report(forged, kind)
        assert ack.code == NOT_CURRENT, ack
        assert "not dispatched" in ack.message
    assert (await rig.state(task_id)) == before


async def test_only_the_current_attempt_takes_a_result_and_repeats_stay_acknowledged(
    rig: Rig,
) -> None:
    task_id = await rig.create(max_attempts=3, backoff_s=3600)
    first = await rig.take(task_id)
    failed_run = uuid.uuid4().hex
    assert (await rig.report(first, worker_pb2.RESULT_KIND_FAILED, failed_run)).code == OK
    after_retry = await rig.state(task_id)
    assert after_retry[:2] == (tasks_pb2.TASK_STATE_SCHEDULED, 2)

    # A late success of attempt 1 (a duplicate delivery's run) is refused: stale attempt.
    late = await rig.report(first, worker_pb2.RESULT_KIND_SUCCEEDED)
    assert late.code == NOT_CURRENT and "not its current attempt" in late.message
    claim = await rig.report(first, worker_pb2.RESULT_KIND_STARTED)
    assert claim.code == NOT_CURRENT, claim
    assert (await rig.state(task_id)) == after_retry
    # The failure reported again (its acknowledgement was lost) is acknowledged, once.
    again = await rig.report(first, worker_pb2.RESULT_KIND_FAILED, failed_run)
    assert again.code == OK, again
    assert (await rig.state(task_id)) == after_retry


async def test_a_success_reported_again_is_acknowledged_and_recorded_once(rig: Rig) -> None:
    task_id = await rig.create()
    delivery = await rig.take(task_id)
    run_id = uuid.uuid4().hex
    for _ in range(3):
        assert (await rig.report(delivery, worker_pb2.RESULT_KIND_SUCCEEDED, run_id)).code == OK
    state, attempt, _, runs = await rig.state(task_id)
    assert (state, attempt, runs) == (tasks_pb2.TASK_STATE_SUCCEEDED, 1, [run_id])
    # Finished: a failure of the same attempt now is not a repeat, and is refused.
    ack = await rig.report(delivery, worker_pb2.RESULT_KIND_FAILED)
    assert ack.code == NOT_CURRENT
    assert (await rig.state(task_id))[3] == [run_id]


async def test_a_worker_drops_a_forged_message_and_still_runs_real_ones(rig: Rig) -> None:
    """A message the server refuses for good is committed with a log line, not reported for
    ever; the worker goes on and a real delivery's run is recorded."""
    victim = await rig.create(delay_s=3600)
    before = await rig.state(victim)
    forged = worker_pb2.Delivery(namespace="default", task_id=victim, queue="q", handler="h")
    # Due now, so the worker runs it at once (a delivery due later is held until then).
    forged.due_time.FromMilliseconds(int(time.time() * 1000))
    producer = LocalReadyQueue(str(rig.tmp / "queue.db"))
    await producer.start()
    try:
        await producer.publish([delivery_codec.from_proto(forged, SHARDS)])
    finally:
        await producer.close()
    real = await rig.create()
    await rig.dispatched(real)  # in the queue before the burst worker looks
    worker = Worker(["q"], concurrency=2)
    worker.register("h", lambda ctx, payload: b"done")
    await asyncio.wait_for(worker.run(rig.address, burst=True), 60)
    assert worker.dropped == 1 and worker.completed == 1
    assert (await rig.state(victim)) == before
    assert (await rig.state(real))[0] == tasks_pb2.TASK_STATE_SUCCEEDED
    assert await rig.consumer.fetch(16) == []


async def test_after_a_rotation_earlier_deliveries_verify_until_their_key_is_retired(
    rig: Rig, server: Server
) -> None:
    """Rotate the file, restart: what the previous key signed is still taken, and the
    dispatcher signs with the new key. Retire the previous key, restart: its tokens are
    refused (naming the key)."""
    early, retired_later = await rig.create(), await rig.create()
    signed_before = {t: await rig.take(t) for t in (early, retired_later)}
    old = load_keys(rig.keys_file)
    save_keys(rig.keys_file, old.rotated(), replace=True)
    await server.stop()
    await server.start()
    ack = await rig.report(signed_before[early], worker_pb2.RESULT_KIND_SUCCEEDED)
    assert ack.code == OK, ack
    fresh = await rig.create()
    new = load_keys(rig.keys_file)
    assert (await rig.take(fresh)).token.split(".")[1] == new.current != old.current

    save_keys(rig.keys_file, new.retired(old.current), replace=True)
    await server.stop()
    await server.start()
    before = await rig.state(retired_later)
    ack = await rig.report(signed_before[retired_later], worker_pb2.RESULT_KIND_SUCCEEDED)
    assert ack.code == grpc.StatusCode.UNAVAILABLE.value[0] and old.current in ack.message
    assert (await rig.state(retired_later)) == before
