"""The operator's verbs through a real gRPC server, its task store on SQLite and on the real
Cassandra. Bulk actions: a dry run counts and shows a sample and acts on nothing; an action
acts on every match exactly once, reports its progress, is not started twice by the same id,
stops when asked, resumes on another server, and is refused for a filter no listing serves
or a state its verb does not act on. Also: listing by label, purging one dead letter, the
recount as an action, and rescheduling a task."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from server.app import Operations
from server.ops.bulk_actions import BulkActions, BulkSettings, TaskVerbs
from server.ops.tasks import TaskOps
from server.wiring import Backends, open_backends
from tests.contract import cassandra_keyspace
from tests.embedded_api import embedded_api, embedded_settings
from tests.factories import make_task
from tests.waiting import eventually_async
from tikk.bulk_actions import BulkState, BulkVerb
from tikk.clock import ManualClock, SystemClock
from tikk.delivery_tokens import new_keys
from tikk.errors import BackendUnavailable, FailedPrecondition, NotFound, TikkError
from tikk.label_selectors import parse_selector
from tikk.model import DeadLetter, Task, TaskState
from tikk.quotas import NamespaceUsage
from tikk.task_filters import TaskFilter
from tikk.telemetry import Telemetry
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import (
    bulk_pb2,
    bulk_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
)

NS = "shop"
HOUR_MS = 3_600_000


@dataclasses.dataclass
class Api:
    bulk: Any
    tasks: Any
    history: Any
    backends: Backends


@pytest.fixture(scope="module")
def keyspace() -> Iterator[cassandra_keyspace.TestKeyspace]:
    ks = cassandra_keyspace.TestKeyspace()
    ks.name = f"tikk_bulk_{os.getpid()}"  # not the contract suites' keyspace, which it drops
    yield ks
    ks.drop()


@pytest.fixture(params=["sqlite", "cassandra"])
async def api(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: cassandra_keyspace.TestKeyspace
) -> AsyncIterator[Api]:
    store_url = keyspace.fresh() if request.param == "cassandra" else ""
    async with embedded_api(embedded_settings(tmp_path, store_url)) as served:
        ch = served.channel
        yield Api(
            bulk_pb2_grpc.BulkServiceStub(ch), tasks_pb2_grpc.TaskServiceStub(ch),
            history_pb2_grpc.HistoryServiceStub(ch), served.backends,
        )  # fmt: skip


def task(task_id: str, labels: dict[str, str], queue: str = "email") -> Task:
    now = SystemClock().now_ms()
    made = make_task(task_id, namespace=NS, queue=queue, due_ms=now + HOUR_MS, created_ms=now)
    return dataclasses.replace(made, labels=labels)


async def stored(api: Api, tasks: Iterable[Task]) -> None:
    await api.backends.store.create_many(list(tasks))


async def dead(api: Api, t: Task, error_type: str) -> None:
    """``t`` created and dead-lettered with an error of ``error_type``."""
    store = api.backends.store
    await store.create(t)
    await store.mark_dispatched([t.entry()], t.created_ms)
    await store.finish_attempt(NS, t.task_id, 1, DeadLetter(error_type, "boom"), t.created_ms + 1)


async def state(api: Api, task_id: str) -> TaskState:
    return (await api.backends.store.get(NS, task_id)).state


def request(dry_run: bool = False, action_id: str = "", **terms: Any) -> bulk_pb2.BulkActionRequest:
    return bulk_pb2.BulkActionRequest(
        filter=bulk_pb2.TaskFilter(namespace=NS, **terms), dry_run=dry_run, action_id=action_id
    )


async def finished(api: Api, action: bulk_pb2.BulkAction) -> bulk_pb2.BulkAction:
    get = bulk_pb2.GetBulkActionRequest(namespace=NS, id=action.id)

    async def ended() -> bulk_pb2.BulkAction | None:
        now = await api.bulk.GetBulkAction(get)
        return now if now.state != bulk_pb2.BULK_ACTION_STATE_RUNNING else None

    done: bulk_pb2.BulkAction = await eventually_async(ended, 60, what=f"{action.id} ended")
    return done


async def test_a_dry_run_counts_and_shows_a_sample_and_acts_on_nothing(api: Api) -> None:
    await stored(api, [task(f"a{i}", {"customer": "acme", "region": "us"}) for i in range(30)])
    await stored(api, [task(f"e{i}", {"customer": "acme", "region": "eu"}) for i in range(5)])
    await stored(api, [task("b1", {"customer": "bolt"})])
    preview = await api.bulk.BulkCancelTasks(
        request(dry_run=True, label_selector="customer=acme,region!=eu")
    )
    assert (preview.dry_run, preview.matched, preview.complete) == (True, 30, True)
    assert preview.read == 35 and preview.id == "" and len(preview.sample) == 10
    assert all(t.labels["region"] == "us" for t in preview.sample)
    assert preview.filter.state == tasks_pb2.TASK_STATE_SCHEDULED  # what cancel acts on
    assert {await state(api, f"a{i}") for i in range(30)} == {TaskState.SCHEDULED}
    listed = await api.bulk.ListBulkActions(bulk_pb2.ListBulkActionsRequest(namespace=NS))
    assert list(listed.actions) == []  # a dry run stores nothing
    counted = await api.bulk.CountTasks(
        bulk_pb2.CountTasksRequest(filter=bulk_pb2.TaskFilter(namespace=NS, queue="email"))
    )
    assert (counted.count, counted.complete) == (36, True)


async def test_a_bulk_cancel_by_label_cancels_each_match_once_and_reports_it(api: Api) -> None:
    await stored(api, [task(f"a{i:04}", {"customer": "acme"}) for i in range(2_000)])
    await stored(api, [task("b1", {"customer": "bolt"}), task("o1", {"customer": "acme"}, "sms")])
    started = await api.bulk.BulkCancelTasks(
        request(action_id="leave-acme", label_selector="customer=acme", queue="email")
    )
    assert started.id == "leave-acme" and started.state == bulk_pb2.BULK_ACTION_STATE_RUNNING
    again = await api.bulk.BulkCancelTasks(request(action_id="leave-acme", queue="other"))
    assert again.filter.queue == "email"  # the same id is the same action, started once
    done = await finished(api, started)
    assert done.state == bulk_pb2.BULK_ACTION_STATE_SUCCEEDED
    assert (done.matched, done.acted, done.skipped, done.failed) == (2_000, 2_000, 0, 0)
    assert done.HasField("finish_time")
    assert {await state(api, f"a{i:04}") for i in range(0, 2_000, 37)} == {TaskState.CANCELLED}
    assert await state(api, "b1") is TaskState.SCHEDULED
    assert await state(api, "o1") is TaskState.SCHEDULED  # another queue
    listed = await api.bulk.ListBulkActions(bulk_pb2.ListBulkActionsRequest(namespace=NS))
    assert [a.id for a in listed.actions] == ["leave-acme"]


async def test_dead_letters_are_redriven_and_purged_by_error_type(api: Api) -> None:
    for i in range(6):
        await dead(api, task(f"t{i}", {}), "TimeoutError" if i % 2 else "ValueError")
    await stored(api, [task("live", {})])
    redriven = await finished(
        api, await api.bulk.BulkRedriveTasks(request(error_type="TimeoutError", queue="email"))
    )
    assert (redriven.matched, redriven.acted) == (3, 3)
    assert [await state(api, f"t{i}") for i in range(6)] == [
        TaskState.DEAD_LETTERED, TaskState.SCHEDULED,
    ] * 3  # fmt: skip
    dead_only = request(state=tasks_pb2.TASK_STATE_DEAD_LETTERED)
    preview = await api.bulk.BulkPurgeTasks(
        bulk_pb2.BulkActionRequest(filter=dead_only.filter, dry_run=True)
    )
    assert preview.matched == 3
    purged = await finished(api, await api.bulk.BulkPurgeTasks(dead_only))
    assert (purged.matched, purged.acted) == (3, 3)
    gone = history_pb2.ListDeadLettersRequest(namespace=NS)
    assert list((await api.history.ListDeadLetters(gone)).tasks) == []
    assert await state(api, "live") is TaskState.SCHEDULED


async def test_a_filter_no_listing_serves_or_a_state_the_verb_skips_is_refused(api: Api) -> None:
    cases = [
        (api.bulk.BulkCancelTasks(request(error_type="X")), "filter: name a queue"),
        (api.bulk.BulkCancelTasks(request(queue="q", state=tasks_pb2.TASK_STATE_DEAD_LETTERED)),
         "filter.state: cancel acts on scheduled tasks, not dead_lettered ones"),
        (api.bulk.BulkRedriveTasks(request(label_selector="region!=eu")),
         "filter.label_selector: 'region!=eu' needs at least one key=value term"),
        (api.bulk.BulkCancelTasks(request(queue="q", action_id="no spaces")), "action_id"),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert message in (err.value.details() or ""), err.value.details()


async def test_tasks_are_listed_by_label_selector(api: Api) -> None:
    await stored(api, [task(f"a{i}", {"team": "a", "region": "us"}) for i in range(5)])
    await stored(api, [task("eu", {"team": "a", "region": "eu"}), task("b", {"team": "b"})])
    found: list[str] = []
    req = tasks_pb2.ListTasksRequest(namespace=NS, label_selector="team=a,region!=eu", page_size=2)
    while True:
        page = await api.tasks.ListTasks(req)
        found += [t.id for t in page.tasks]
        if not page.next_page_token:
            break
        req.page_token = page.next_page_token
    assert sorted(found) == [f"a{i}" for i in range(5)]


async def test_a_single_dead_letter_is_purged(api: Api) -> None:
    await dead(api, task("d1", {}), "E")
    gone = await api.history.PurgeDeadLetter(
        history_pb2.PurgeDeadLetterRequest(namespace=NS, task_id="d1")
    )
    assert gone.id == "d1" and gone.state == tasks_pb2.TASK_STATE_DEAD_LETTERED
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.tasks.GetTask(tasks_pb2.GetTaskRequest(namespace=NS, task_id="d1"))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND


async def test_a_stopped_action_ends_and_stays_stopped(api: Api) -> None:
    await stored(api, [task(f"a{i:04}", {"customer": "acme"}) for i in range(3_000)])
    started = await api.bulk.BulkCancelTasks(request(label_selector="customer=acme"))
    stop = bulk_pb2.StopBulkActionRequest(namespace=NS, id=started.id)
    stopped = await api.bulk.StopBulkAction(stop)
    assert stopped.state in (
        bulk_pb2.BULK_ACTION_STATE_STOPPED,
        bulk_pb2.BULK_ACTION_STATE_SUCCEEDED,
    )
    await asyncio.sleep(0.5)
    later = await api.bulk.GetBulkAction(bulk_pb2.GetBulkActionRequest(namespace=NS, id=started.id))
    assert later.state == stopped.state and later.acted == stopped.acted
    assert (await api.bulk.StopBulkAction(stop)).state == stopped.state  # a no-op now


class DiesAfter:
    """A server's task verbs that fail (as a store that went away would) once ``most``
    cancels went through: the server running an action dies in the middle of a page."""

    def __init__(self, tasks: TaskOps, most: int) -> None:
        self._tasks = tasks
        self.left = most

    async def cancel(self, namespace: str, task_id: str) -> Task:
        if self.left <= 0:
            raise BackendUnavailable("the server went away")
        self.left -= 1
        return await self._tasks.cancel(namespace, task_id)

    async def cancel_many(self, namespace: str, task_ids: Sequence[str]) -> list[Task | TikkError]:
        """One at a time, so the server dies exactly ``most`` cancels in."""
        outcomes: list[Task | TikkError] = []
        for task_id in task_ids:
            try:
                outcomes.append(await self.cancel(namespace, task_id))
            except (NotFound, FailedPrecondition) as exc:
                outcomes.append(exc)
        return outcomes

    async def redrive(self, namespace: str, task_id: str) -> Task:
        return await self._tasks.redrive(namespace, task_id)

    async def purge(self, namespace: str, task_id: str) -> Task:
        return await self._tasks.purge(namespace, task_id)

    async def get(self, namespace: str, task_id: str) -> Task:
        return await self._tasks.get(namespace, task_id)


def runner(
    backends: Backends, ops: Operations, verbs: TaskVerbs, clock: ManualClock, owner: str
) -> BulkActions:
    """A server's bulk-action runner, a page of 100 at a time, one task at a time."""
    small = BulkSettings(page_size=100, concurrency=1, lease_ms=30_000)
    return BulkActions(
        backends.bulk_actions, ops.search, verbs, clock, owner=owner, quotas=backends.quotas,
        settings=small,
    )  # fmt: skip


async def test_another_server_resumes_an_action_whose_server_died_acting_once_on_each(
    tmp_path: Path,
) -> None:
    settings = embedded_settings(tmp_path)
    clock = ManualClock(SystemClock().now_ms())
    backends = await open_backends(settings)
    try:
        ops = Operations.over(backends, settings, clock, rng=random.Random(1),
                              telemetry=Telemetry(), keys=new_keys())  # fmt: skip
        tasks = [dataclasses.replace(task(f"a{i:04}", {"customer": "acme"}),
                                     created_ms=clock.now_ms(), due_ms=clock.now_ms() + HOUR_MS)
                 for i in range(1_000)]  # fmt: skip
        await backends.store.create_many(tasks)
        first = runner(backends, ops, DiesAfter(ops.tasks, 250), clock, "s1")
        second = runner(backends, ops, ops.tasks, clock, "s2")
        f = TaskFilter(NS, labels=parse_selector("customer=acme"))
        action = await first.start(BulkVerb.CANCEL, f, "acme")
        with pytest.raises(BackendUnavailable):
            await first.run_due()  # two pages stored, then it dies 50 tasks into the third
        left = await backends.bulk_actions.get(NS, "acme")
        assert (left.owner, left.progress.acted, left.state) == ("s1", 200, BulkState.RUNNING)
        await second.run_due()  # s1's lease holds: not taken yet
        assert (await backends.bulk_actions.get(NS, "acme")).version == left.version
        clock.advance(30_001)
        await second.run_due()
        done = await backends.bulk_actions.get(NS, action.action_id)
        assert (done.state, done.owner) == (BulkState.SUCCEEDED, "s2")
        # The 50 acted on in the lost page were found cancelled and no longer matched.
        assert (done.progress.acted, done.progress.matched, done.progress.failed) == (950, 950, 0)
        states = {(await backends.store.get(NS, t.task_id)).state for t in tasks}
        assert states == {TaskState.CANCELLED}
    finally:
        await backends.close()


async def test_a_recount_runs_as_an_action_and_sets_the_usage(api: Api) -> None:
    await stored(api, [task(f"a{i:03}", {}) for i in range(300)])
    await stored(api, [task("x", {}, "sms")])
    quotas = api.backends.quotas
    await quotas.put_usage(NS, NamespaceUsage(tasks_stored=7))  # drifted
    started = await api.bulk.RecountUsage(bulk_pb2.RecountUsageRequest(namespace=NS))
    assert started.verb == bulk_pb2.BULK_VERB_RECOUNT
    done = await finished(api, started)
    assert (done.state, done.matched, done.acted) == (
        bulk_pb2.BULK_ACTION_STATE_SUCCEEDED,
        301,
        301,
    )
    assert done.read >= 301
    assert await quotas.usage(NS) == NamespaceUsage(tasks_stored=301)


async def test_a_scheduled_task_is_rescheduled_and_a_dispatched_one_is_not(api: Api) -> None:
    t = task("r1", {})
    await stored(api, [t])
    later = t.due_ms + 86_400_000
    moved = await api.tasks.RescheduleTask(tasks_pb2.RescheduleTaskRequest(
        namespace=NS, task_id="r1", run_at=to_timestamp(later), payload=b"v2",
    ))  # fmt: skip
    assert moved.due_time.ToMilliseconds() == later and moved.payload == b"v2"
    assert moved.attempt == 1 and moved.state == tasks_pb2.TASK_STATE_SCHEDULED
    stored_now = await api.backends.store.get(NS, "r1")
    assert (stored_now.due_ms, stored_now.payload) == (later, b"v2")
    await api.backends.store.mark_dispatched([stored_now.entry()], stored_now.due_ms)
    for request, code in [
        (tasks_pb2.RescheduleTaskRequest(namespace=NS, task_id="r1", delay=to_duration(5_000)),
         grpc.StatusCode.FAILED_PRECONDITION),
        (tasks_pb2.RescheduleTaskRequest(namespace=NS, task_id="r1"),
         grpc.StatusCode.INVALID_ARGUMENT),
        (tasks_pb2.RescheduleTaskRequest(namespace=NS, task_id="nope", delay=to_duration(5_000)),
         grpc.StatusCode.NOT_FOUND),
    ]:  # fmt: skip
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await api.tasks.RescheduleTask(request)
        assert err.value.code() is code, err.value.details()
