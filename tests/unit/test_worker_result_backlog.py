"""A server that does not answer delays a worker's acknowledgements, not its starts: a real
Worker on the real embedded queue (an SQLite file), reporting to a real ``WorkerService`` on
loopback (``tests.worker_server``) that is stopped and started again on the same port.

Handler slots free when handlers return; the messages whose results wait for the server are
held (bounded by the result backlog) and committed only once acknowledged.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from dispatcher.ready_queue.local import LocalReadyQueue
from tests.contract.test_ready_queue import delivery, waiting
from tests.waiting import eventually_async
from tests.worker_server import WorkerServer
from worker_sdk import TaskContext, Worker
from worker_sdk.queues.consumer import Message
from worker_sdk.queues.local import LocalQueueConsumer

CONCURRENCY = 4
# Results are never given up on during a test: how long the server is away does not matter.
NEVER_STEP_ASIDE_S = 3600.0


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch, server: WorkerServer) -> list[tuple[str, bool]]:
    """Every message the worker commits, in order: (task id, whether the server had
    acknowledged a result of that task when the commit was made)."""
    made: list[tuple[str, bool]] = []
    commit_many = LocalQueueConsumer.commit_many

    async def noting(self: LocalQueueConsumer, messages: Sequence[Message]) -> None:
        for m in messages:
            made.append((m.delivery.task_id, m.delivery.task_id in server.acked_tasks))
        await commit_many(self, messages)

    monkeypatch.setattr(LocalQueueConsumer, "commit_many", noting)
    return made


def starting_worker(started: Counter[str], **options: int) -> Worker:
    worker = Worker(
        queues=["q"],
        concurrency=CONCURRENCY,
        report_timeout_s=NEVER_STEP_ASIDE_S,
        shutdown_timeout_s=30.0,
        **options,  # type: ignore[arg-type]
    )

    @worker.handler("h")
    async def record(ctx: TaskContext, payload: bytes) -> None:
        started[ctx.task_id] += 1

    return worker


async def worker_up(
    worker: Worker, server: WorkerServer
) -> tuple[asyncio.Task[int], asyncio.Event]:
    """Run ``worker`` until it has its config and a first result was acknowledged: from then
    on it no longer needs the server to start runs."""
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(server.address, stop=stop))
    await eventually_async(lambda: server.acked_tasks == {"warm-up"}, 30, what="warmed up")
    return running, stop


async def test_a_worker_keeps_starting_while_the_server_is_away_and_commits_after_it_answers(
    queue: LocalReadyQueue, server: WorkerServer, commits: list[tuple[str, bool]]
) -> None:
    started: Counter[str] = Counter()
    await queue.publish([delivery("warm-up")])
    worker = starting_worker(started, result_backlog=4 * CONCURRENCY)
    running, stop = await worker_up(worker, server)
    await server.stop()
    tasks = {f"t{i}" for i in range(3 * CONCURRENCY)}  # within the backlog
    await queue.publish([delivery(t) for t in sorted(tasks)])
    # Every handler starts with the server away: far more than the worker's slots.
    await eventually_async(lambda: tasks <= set(started), 30, what="all started")
    assert not tasks & server.acked_tasks
    assert not {task for task, _ in commits} & tasks  # none committed before acknowledgement
    assert waiting(await queue.backlog()) == {"q": (len(tasks), True)}  # all still held

    await server.start()  # the same port
    await eventually_async(lambda: tasks <= server.acked_tasks, 30, what="all acknowledged")
    stop.set()
    async with asyncio.timeout(60):
        assert await running == len(tasks) + 1
    assert set(started.values()) == {1}
    assert sorted(task for task, _ in commits) == sorted(tasks | {"warm-up"})
    assert all(acked for _, acked in commits)  # each commit only after its acknowledgement
    assert waiting(await queue.backlog()) == {"q": (0, False)}


async def test_a_full_result_backlog_pauses_intake_until_the_server_answers(
    queue: LocalReadyQueue,
    server: WorkerServer,
    commits: list[tuple[str, bool]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    backlog = 2 * CONCURRENCY
    started: Counter[str] = Counter()
    await queue.publish([delivery("warm-up")])
    running, stop = await worker_up(starting_worker(started, result_backlog=backlog), server)
    await server.stop()
    tasks = {f"t{i}" for i in range(4 * backlog)}
    await queue.publish([delivery(t) for t in sorted(tasks)])
    await eventually_async(lambda: len(started) == backlog + 1, 30, what="backlog full")
    # Letting time pass is the point here: nothing more starts while the backlog is full.
    await asyncio.sleep(1.0)
    assert len(started) == backlog + 1
    assert waiting(await queue.backlog()) == {"q": (len(tasks), True)}
    assert f"result backlog full ({backlog} message(s) held" in caplog.text

    await server.start()
    await eventually_async(lambda: tasks <= server.acked_tasks, 60, what="all acknowledged")
    stop.set()
    async with asyncio.timeout(60):
        assert await running == len(tasks) + 1
    assert set(started) == tasks | {"warm-up"} and set(started.values()) == {1}
    assert all(acked for _, acked in commits) and len(commits) == len(tasks) + 1
    assert "result backlog drained" in caplog.text
    assert waiting(await queue.backlog()) == {"q": (0, False)}


def test_a_backlog_smaller_than_the_concurrency_is_refused() -> None:
    with pytest.raises(ValueError, match=r"result backlog \(3\) must be at least the concurrency"):
        Worker(queues=["q"], concurrency=4, result_backlog=3)
    assert Worker(queues=["q"], concurrency=4).result_backlog == 4  # as many as it runs
