"""Per-namespace quotas through a real gRPC server, its task store on SQLite and on the real
Cassandra: each quota refuses a request over it whole (RESOURCE_EXHAUSTED naming the quota,
its value and the namespace; nothing written), admits one under it, and follows a change
made while servers run."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from server.wiring import Backends
from tests.contract import cassandra_keyspace
from tests.embedded_api import embedded_api, embedded_settings
from tests.waiting import eventually_async
from tikk.client import AsyncClient, ResourceExhaustedError, TaskSpec
from tikk.clock import ManualClock
from tikk.quotas import NamespaceQuotas, NamespaceUsage
from tikk.settings import QuotaSettings
from tikk.timestamps import to_duration
from tikk.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
)

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
NS = "tenant"
NOW_MS = 1_800_000_000_000


@dataclass
class Api:
    """One server process's API, over its own channel."""

    tasks: Any
    schedules: Any
    admin: Any
    backends: Backends
    address: str


@dataclass
class Servers:
    """Servers on one store (as the processes of a deployment), sharing a clock."""

    tmp_path: Path
    store_url: str = ""
    clock: ManualClock = field(default_factory=lambda: ManualClock(NOW_MS))
    apis: list[Api] = field(default_factory=list)
    _running: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def start(self, quotas: QuotaSettings | None = None) -> Api:
        quotas = quotas or QuotaSettings()
        settings = embedded_settings(self.tmp_path, self.store_url, quotas=quotas)
        served = await self._running.enter_async_context(embedded_api(settings, clock=self.clock))
        channel = served.channel
        api = Api(
            tasks_pb2_grpc.TaskServiceStub(channel),
            schedules_pb2_grpc.ScheduleServiceStub(channel),
            admin_pb2_grpc.AdminServiceStub(channel),
            served.backends,
            served.address,
        )
        self.apis.append(api)
        return api

    async def close(self) -> None:
        await self._running.aclose()


@pytest.fixture(scope="module")
def keyspace() -> Iterator[cassandra_keyspace.TestKeyspace]:
    ks = cassandra_keyspace.TestKeyspace()
    ks.name = f"tikk_quotas_{os.getpid()}"  # not the contract suites' keyspace, which it drops
    yield ks
    ks.drop()


@pytest.fixture(params=["sqlite", "cassandra"])
async def servers(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: cassandra_keyspace.TestKeyspace
) -> AsyncIterator[Servers]:
    group = Servers(tmp_path, keyspace.fresh() if request.param == "cassandra" else "")
    yield group
    await group.close()


@pytest.fixture
async def api(servers: Servers) -> Api:
    return await servers.start()


async def set_quotas(api: Api, namespace: str = NS, **quotas: int) -> Any:
    req = admin_pb2.SetNamespaceQuotasRequest(
        namespace=namespace, quotas=admin_pb2.Quotas(**quotas)
    )
    return await api.admin.SetNamespaceQuotas(req)


def task(task_id: str = "", namespace: str = NS) -> tasks_pb2.CreateTaskRequest:
    # Due in an hour: cancellable on every store (Cassandra refuses a cancel close to due).
    return tasks_pb2.CreateTaskRequest(
        namespace=namespace, task_id=task_id, queue="q", handler="h", payload=b"p",
        delay=to_duration(3_600_000),
    )  # fmt: skip


async def usage_seen(api: Api, tasks_stored: int = 1) -> bool:
    req = admin_pb2.GetNamespaceQuotasRequest(namespace=NS)
    return bool((await api.admin.GetNamespaceQuotas(req)).usage.tasks_stored == tasks_stored)


async def create(api: Api, task_id: str = "", namespace: str = NS) -> None:
    await api.tasks.CreateTask(task(task_id, namespace))


async def refused(call: Any) -> str:
    """The details of ``call``'s RESOURCE_EXHAUSTED (failing on anything else)."""
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call
    assert failure.value.code() is EXHAUSTED, failure.value.details()
    return failure.value.details() or ""


async def stored(api: Api, namespace: str = NS) -> set[str]:
    req = tasks_pb2.ListTasksRequest(namespace=namespace, queue="q", page_size=1000)
    return {t.id for t in (await api.tasks.ListTasks(req)).tasks}


def batch(ids: Iterable[str], batch_id: int = 0) -> tasks_pb2.ImportTasksRequest:
    return tasks_pb2.ImportTasksRequest(batch_id=batch_id, tasks=[task(i) for i in ids])


async def import_all(api: Api, *batches: tasks_pb2.ImportTasksRequest) -> list[Any]:
    return [answer async for answer in api.tasks.ImportTasks(iter(batches))]


async def admitted(api: Api, task_id: str) -> bool:
    """Whether a stream importing ``task_id`` alone was given a slot (and stored it)."""
    [answer] = await import_all(api, batch([task_id]))
    return bool(answer.accepted == 1)


# --- tasks stored --------------------------------------------------------------------------


async def test_tasks_stored_refuses_a_batch_that_would_pass_it(api: Api) -> None:
    await set_quotas(api, tasks_stored=5)
    [first, over] = await import_all(api, batch(["a", "b", "c"]), batch(["d", "e", "f"], 1))
    assert (first.code, first.accepted) == (0, 3)
    assert over.code == EXHAUSTED.value[0] and not over.results
    assert "quota tasks_stored of namespace 'tenant' is 5" in over.message
    assert await stored(api) == {"a", "b", "c"}  # nothing of the refused batch
    await create(api, "d")
    await create(api, "e")  # up to the quota: admitted
    assert "tasks_stored" in await refused(api.tasks.CreateTask(task("f")))
    assert await stored(api) == {"a", "b", "c", "d", "e"}


async def test_finished_tasks_make_room_and_other_namespaces_are_not_counted(api: Api) -> None:
    await set_quotas(api, tasks_stored=1)
    await create(api, "a")
    await create(api, "x", namespace="neighbour")
    await refused(api.tasks.CreateTask(task("b")))
    await api.tasks.CancelTask(tasks_pb2.CancelTaskRequest(namespace=NS, task_id="a"))
    await create(api, "b")
    answer = await api.admin.GetNamespaceQuotas(admin_pb2.GetNamespaceQuotasRequest(namespace=NS))
    assert answer.usage.tasks_stored == 1


async def test_a_create_stream_stops_at_the_chunk_over_the_quota(api: Api) -> None:
    await set_quotas(api, tasks_stored=3)
    chunks = [tasks_pb2.CreateTasksRequest(tasks=[task(f"{c}{i}") for i in range(2)])
              for c in "ab"]  # fmt: skip
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await api.tasks.CreateTasks(iter(chunks))
    assert failure.value.code() is EXHAUSTED
    assert "after 2 items" in (failure.value.details() or "")
    assert await stored(api) == {"a0", "a1"}


# --- tasks per second ----------------------------------------------------------------------


async def test_tasks_per_second_admits_the_rate_in_each_second(servers: Servers, api: Api) -> None:
    await set_quotas(api, tasks_per_second=4)
    for i in range(4):
        await create(api, f"t{i}")
    details = await refused(api.tasks.CreateTask(task("late")))
    assert "quota tasks_per_second of namespace 'tenant' is 4: retry after a moment" in details
    await create(api, "other", namespace="neighbour")  # each namespace its own rate
    servers.clock.advance(999)  # still the same second
    await refused(api.tasks.CreateTask(task("t4")))
    servers.clock.advance(1)  # the next second
    for i in range(4, 8):
        await create(api, f"t{i}")
    await refused(api.tasks.CreateTask(task("t8")))
    assert await stored(api) == {f"t{i}" for i in range(8)}


async def test_a_create_stream_larger_than_a_seconds_rate_is_refused_saying_so(api: Api) -> None:
    await set_quotas(api, tasks_per_second=4)
    chunk = tasks_pb2.CreateTasksRequest(tasks=[task(f"c{i}") for i in range(5)])
    details = await refused(api.tasks.CreateTasks(iter([chunk])))
    assert "5 tasks in one request is more than a second's rate" in details
    assert "ImportTasks is paced" in details and await stored(api) == set()


async def test_an_import_over_the_rate_is_paced_not_refused(servers: Servers, api: Api) -> None:
    """Ten tasks at four a second: admitted over three seconds of the clock, none refused."""
    await set_quotas(api, tasks_per_second=4)
    ticking = asyncio.create_task(tick(servers.clock))
    try:
        answers = await import_all(api, batch([f"i{i}" for i in range(6)], 0),
                                   batch([f"i{i}" for i in range(6, 10)], 1))  # fmt: skip
        ended_ms = servers.clock.now_ms()
    finally:
        ticking.cancel()
    assert [(a.accepted, a.message) for a in answers] == [(6, ""), (4, "")]
    assert await stored(api) == {f"i{i}" for i in range(10)}
    assert ended_ms >= NOW_MS + 2_000  # 4 in the first second, 4 in the next, 2 in the third


async def tick(clock: ManualClock) -> None:
    """The shared clock a tenth of a second on every 20 ms of real time."""
    while True:
        await asyncio.sleep(0.02)
        clock.advance(100)


async def test_servers_on_one_store_admit_the_rate_together(servers: Servers) -> None:
    """Separate servers (separate hosts, or the processes of a group) draw from one
    allowance: together they admit the rate, not each."""
    first, second = await servers.start(), await servers.start()
    await set_quotas(first, tasks_per_second=4)
    for api, task_id in ((first, "a"), (second, "b"), (first, "c"), (second, "d")):
        await create(api, task_id)
    for api in (first, second):
        assert "retry after a moment" in await refused(api.tasks.CreateTask(task("e")))
    assert await stored(first) == {"a", "b", "c", "d"}


# --- schedules -----------------------------------------------------------------------------


def schedule(schedule_id: str, namespace: str = NS) -> schedules_pb2.CreateScheduleRequest:
    return schedules_pb2.CreateScheduleRequest(
        schedule=schedules_pb2.Schedule(
            namespace=namespace, id=schedule_id, queue="q", handler="h",
            spec=schedules_pb2.ScheduleSpec(cron="0 * * * *"),
        )
    )  # fmt: skip


async def test_schedules_quota_counts_the_namespace_schedules(api: Api) -> None:
    await set_quotas(api, schedules=2)
    await api.schedules.CreateSchedule(schedule("a"))
    await api.schedules.CreateSchedule(schedule("b"))
    details = await refused(api.schedules.CreateSchedule(schedule("c")))
    assert "quota schedules of namespace 'tenant' is 2" in details
    await api.schedules.CreateSchedule(schedule("c", namespace="neighbour"))
    listed = await api.schedules.ListSchedules(schedules_pb2.ListSchedulesRequest(namespace=NS))
    assert [s.id for s in listed.schedules] == ["a", "b"]
    gone = schedules_pb2.DeleteScheduleRequest(namespace=NS, schedule_id="a")
    await api.schedules.DeleteSchedule(gone)
    await api.schedules.CreateSchedule(schedule("c"))


# --- import streams ------------------------------------------------------------------------


async def test_import_streams_at_once(api: Api) -> None:
    await set_quotas(api, import_streams=1)
    held: asyncio.Queue[tasks_pb2.ImportTasksRequest | None] = asyncio.Queue()

    async def feed() -> AsyncIterator[tasks_pb2.ImportTasksRequest]:
        while (b := await held.get()) is not None:
            yield b

    first = api.tasks.ImportTasks(feed())
    await held.put(batch(["a"]))
    assert (await first.read()).accepted == 1  # the first stream holds the namespace's slot
    [second] = await import_all(api, batch(["b"]))
    assert second.code == EXHAUSTED.value[0]
    assert "quota import_streams of namespace 'tenant' is 1" in second.message
    await held.put(None)
    assert await first.read() is grpc.aio.EOF  # type: ignore[attr-defined]
    # The server ends its side of the stream, then gives the slot back.
    await eventually_async(lambda: admitted(api, "c"), 10, what="the slot given back")
    assert await stored(api) == {"a", "c"}


async def test_a_cancelled_import_stream_gives_its_slot_back(api: Api) -> None:
    await set_quotas(api, import_streams=1)
    never = asyncio.Event()

    async def one_then_wait() -> AsyncIterator[tasks_pb2.ImportTasksRequest]:
        yield batch(["a"])
        await never.wait()

    first = api.tasks.ImportTasks(one_then_wait())
    assert (await first.read()).accepted == 1
    [refused_batch] = await import_all(api, batch(["b"]))
    assert refused_batch.code == EXHAUSTED.value[0]
    first.cancel()  # the client goes away mid-stream
    await eventually_async(lambda: admitted(api, "c"), 10, what="the slot given back")
    assert await stored(api) == {"a", "c"}


# --- administration ------------------------------------------------------------------------


async def test_a_change_reaches_another_running_server_within_its_cache(
    servers: Servers,
) -> None:
    first = await servers.start()
    second = await servers.start()
    await create(second, "a")  # reads (and caches) the namespace's quotas: none
    answer = await set_quotas(first, tasks_stored=1)
    assert answer.quotas.tasks_stored == 1
    # On Cassandra another server's count arrives with its next counter flush.
    await eventually_async(lambda: usage_seen(first), 5, what="the other server's task counted")
    await create(second, "b")  # within the cache, the old quotas still apply
    servers.clock.advance(QuotaSettings().cache_ms)
    assert "tasks_stored" in await refused(second.tasks.CreateTask(task("c")))
    await set_quotas(first)  # no quotas at all
    servers.clock.advance(QuotaSettings().cache_ms)
    await create(second, "c")


async def test_defaults_apply_where_a_namespace_has_no_quota_of_its_own(
    servers: Servers,
) -> None:
    api = await servers.start(QuotaSettings(defaults=NamespaceQuotas(tasks_stored=1)))
    await create(api, "a")
    await refused(api.tasks.CreateTask(task("b")))
    answer = await set_quotas(api, tasks_stored=3)
    assert answer.effective.tasks_stored == 3
    await create(api, "b")
    plain = await api.admin.GetNamespaceQuotas(
        admin_pb2.GetNamespaceQuotasRequest(namespace="neighbour")
    )
    assert not plain.quotas.HasField("tasks_stored")
    assert plain.effective.tasks_stored == 1


async def test_a_negative_quota_is_invalid(api: Api) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await set_quotas(api, schedules=-1)
    assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "quotas.schedules" in (failure.value.details() or "")


async def test_the_python_client_reads_and_sets_quotas(api: Api) -> None:
    async with AsyncClient(api.address, namespace=NS) as client:
        await client.create_task(TaskSpec(queue="q", handler="h"))
        answer = await client.set_namespace_quotas(tasks_stored=1, import_streams=2)
        assert (answer.quotas.tasks_stored, answer.quotas.import_streams) == (1, 2)
        assert not answer.quotas.HasField("schedules")
        with pytest.raises(ResourceExhaustedError, match="tasks_stored"):
            await client.create_task(TaskSpec(queue="q", handler="h"))
        await client.set_namespace_quotas()  # every quota cleared
        await client.create_task(TaskSpec(queue="q", handler="h"))
        got = await client.get_namespace_quotas()
        assert not got.quotas.HasField("tasks_stored") and got.usage.tasks_stored == 2


async def test_recount_repairs_a_drifted_usage_and_the_quota_follows_it(api: Api) -> None:
    await set_quotas(api, tasks_stored=3)
    await create(api, "a")
    await api.backends.quotas.put_usage(NS, NamespaceUsage(tasks_stored=3))  # drifted up
    await refused(api.tasks.CreateTask(task("b")))
    req = admin_pb2.RecountNamespaceUsageRequest(namespace=NS)
    assert (await api.admin.RecountNamespaceUsage(req)).usage.tasks_stored == 1
    await create(api, "b")
