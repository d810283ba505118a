"""The client repeats calls that are safe to repeat after UNAVAILABLE (``CallRetries``), with
its time injected so nothing here waits: the waits of the backoff, the bound of the attempts
and of the call's timeout, and that unsafe calls and other codes are raised at once. Against
a real gRPC server on loopback that fails the first calls (blocking and asyncio clients), and
against a real tikk server whose store loses the answer of a create it wrote."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from tests.embedded_api import embedded_api, embedded_settings
from tikk.client import (
    AsyncClient,
    CallRetries,
    Client,
    ClientError,
    DeadlineExceededError,
    Recurrence,
    ScheduleDefinition,
    TaskSelection,
    TaskSpec,
    UnavailableError,
)
from tikk.client.retries import NEVER_REPEATED, REPEATED_ALWAYS, REPEATED_WITH_ID
from tikk.errors import BackendUnavailable, TikkError
from tikk.model import Task
from tikk.store.sqlite.tasks import SqliteTaskStore
from tikk.v1 import admin_pb2, bulk_pb2, history_pb2, schedules_pb2, tasks_pb2

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
LATER = datetime(2031, 1, 1, tzinfo=UTC)


# The handler base is generic in the type stubs only.
if TYPE_CHECKING:
    _Handler = grpc.GenericRpcHandler[Any, Any]
else:
    _Handler = grpc.GenericRpcHandler


class Flaky(_Handler):
    """Answers every unary method of every service: the first ``failures`` calls with
    ``code``, the others with an empty message (each field at its default). Records each
    call's method and the time its caller left it."""

    def __init__(self) -> None:
        self.failures = 0
        self.code = UNAVAILABLE
        self.calls: list[str] = []
        self.time_left: list[float | None] = []
        self._lock = threading.Lock()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any]:
        method = str(details.method).rsplit("/", 1)[-1]

        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            with self._lock:
                self.calls.append(method)
                self.time_left.append(context.time_remaining())
                failing = len(self.calls) <= self.failures
            if failing:
                context.abort(self.code, "the server is restarting")
            return b""

        return grpc.unary_unary_rpc_method_handler(answer)  # bytes in and out


@pytest.fixture
def flaky() -> Iterator[tuple[Flaky, str]]:
    handler = Flaky()
    pool = ThreadPoolExecutor(max_workers=4)
    server = grpc.server(pool, handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield handler, f"127.0.0.1:{port}"
    server.stop(None).wait()
    pool.shutdown()


@dataclass
class FakeTime:
    """The time of a policy: sleeping only moves the clock."""

    now: float = 1_000.0
    slept: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def clock(self) -> float:
        return self.now

    def policy(self, uniform: Callable[[], float] = lambda: 0.5, **options: Any) -> CallRetries:
        return CallRetries(
            sleep=self.sleep, async_sleep=self.async_sleep, clock=self.clock, uniform=uniform,
            **options,
        )  # fmt: skip


# The policy


def test_the_ceiling_grows_by_the_multiplier_up_to_the_cap() -> None:
    policy = CallRetries(initial_backoff_s=0.1, max_backoff_s=1.0, multiplier=2, jitter="none")
    ceilings = [policy.backoff(n) for n in range(1, 8)]
    assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_full_jitter_draws_each_wait_below_its_ceiling() -> None:
    draws = iter([0.0, 0.25, 0.999, 0.5])
    policy = CallRetries(initial_backoff_s=0.2, max_backoff_s=2.0, uniform=lambda: next(draws))
    waits = [policy.backoff(n) for n in range(1, 5)]
    assert waits == pytest.approx([0.0, 0.1, 0.7992, 0.8])


@pytest.mark.parametrize(
    "options",
    [{"attempts": 0}, {"initial_backoff_s": -1}, {"initial_backoff_s": 3, "max_backoff_s": 2},
     {"multiplier": 0.5}, {"jitter": "half"}],
)  # fmt: skip
def test_a_policy_that_cannot_work_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CallRetries(**options)


def test_every_method_of_the_client_services_is_classified() -> None:
    files = (tasks_pb2, schedules_pb2, history_pb2, admin_pb2, bulk_pb2)
    methods = {m.name for f in files for s in f.DESCRIPTOR.services_by_name.values()
               for m in s.methods}  # fmt: skip
    rules = [REPEATED_ALWAYS, set(REPEATED_WITH_ID), NEVER_REPEATED]
    assert {m for m in methods if sum(m in rule for rule in rules) != 1} == set()
    assert set().union(*rules) == methods  # none that no service has


# Blocking client against a server that fails the first calls


def test_a_read_is_repeated_with_the_waits_of_the_backoff(flaky: tuple[Flaky, str]) -> None:
    server, address = flaky
    server.failures = 5
    time = FakeTime()
    retry = time.policy(attempts=6, initial_backoff_s=0.1, max_backoff_s=1.0)
    with Client(address, retry=retry) as client:
        client.get_task("t")
    assert server.calls == ["GetTask"] * 6
    assert time.slept == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5])  # draws of 0.5


def test_the_attempts_are_bounded_and_the_last_unavailable_raised(
    flaky: tuple[Flaky, str],
) -> None:
    server, address = flaky
    server.failures = 100
    time = FakeTime()
    retry = time.policy(attempts=3)
    with Client(address, retry=retry) as client, pytest.raises(UnavailableError, match="restart"):
        client.list_tasks("q").page()
    assert server.calls == ["ListTasks"] * 3
    assert len(time.slept) == 2


@pytest.mark.parametrize("retry", [None, CallRetries(attempts=1)])
def test_retries_turned_off_raise_at_once(
    flaky: tuple[Flaky, str], retry: CallRetries | None
) -> None:
    server, address = flaky
    server.failures = 1
    with Client(address, retry=retry) as client, pytest.raises(UnavailableError):
        client.get_task("t")
    assert server.calls == ["GetTask"]


def test_the_whole_call_stays_within_its_timeout(flaky: tuple[Flaky, str]) -> None:
    server, address = flaky
    server.failures = 100
    time = FakeTime()
    retry = time.policy(attempts=10, initial_backoff_s=0.4, jitter="none")
    with Client(address, timeout=1.0, retry=retry) as client, pytest.raises(UnavailableError):
        client.get_task("t")
    # 0.4 s waited, then a wait of 0.8 s would end past the 1 s: not begun.
    assert (server.calls, time.slept) == (["GetTask"] * 2, [0.4])
    first, second = server.time_left
    assert first is not None and second is not None
    # Each attempt gets what is left (as gRPC rounds a timeout on the wire, less the time the
    # call took to arrive, which a busy machine stretches).
    assert first == pytest.approx(0.95, abs=0.1) and second == pytest.approx(0.55, abs=0.1)


def _selection() -> TaskSelection:
    return TaskSelection(queue="q")


def _schedule(schedule_id: str) -> ScheduleDefinition:
    return ScheduleDefinition(schedule_id, Recurrence(cron="@daily"), "q", "h")


SAFE: dict[str, Callable[[Client], object]] = {
    "CreateTask with a task id": lambda c: c.create_task(TaskSpec("q", "h", task_id="t")),
    "CreateSchedule with an id": lambda c: c.create_schedule(_schedule("s")),
    "CancelTask": lambda c: c.cancel_task("t"),
    "BulkCancelTasks with an action id": lambda c: c.bulk_cancel(_selection(), action_id="a"),
    "BulkPurgeTasks dry run": lambda c: c.bulk_purge(_selection(), dry_run=True),
    "RecountUsage with an action id": lambda c: c.recount_usage(action_id="a"),
    "StopBulkAction": lambda c: c.stop_bulk_action("a"),
    "ListTasks page": lambda c: c.list_tasks("q").page(),
    "ListRuns page": lambda c: c.list_runs("q").page(),
    "CountTasks": lambda c: c.count_tasks(_selection()),
    "PreviewSchedule": lambda c: c.preview_schedule("s"),
    "GetNamespaceQuotas": lambda c: c.get_namespace_quotas(),
    "SetNamespaceQuotas": lambda c: c.set_namespace_quotas(schedules=3),
    "UpdateQueue": lambda c: c.pause_queue("q"),
    "BackfillSchedule": lambda c: c.backfill_schedule("s", LATER, LATER + timedelta(days=1)),
}
UNSAFE: dict[str, Callable[[Client], object]] = {
    "CreateTask without a task id": lambda c: c.create_task(TaskSpec("q", "h")),
    "CreateSchedule without an id": lambda c: c.create_schedule(_schedule("")),
    "BulkCancelTasks without an action id": lambda c: c.bulk_cancel(_selection()),
    "RecountUsage without an action id": lambda c: c.recount_usage(),
    "TriggerSchedule": lambda c: c.trigger_schedule("s"),
    "RescheduleTask": lambda c: c.reschedule_task("t", delay=timedelta(minutes=1)),
    "RedriveTask": lambda c: c.redrive_task("t"),
    "PurgeDeadLetter": lambda c: c.purge_dead_letter("t"),
    "DeleteSchedule": lambda c: c.delete_schedule("s"),
    "PauseSchedule": lambda c: c.pause_schedule("s"),
    "RecountNamespaceUsage": lambda c: c.recount_namespace_usage(),
}


@pytest.mark.parametrize("call", list(SAFE.values()), ids=list(SAFE))
def test_a_call_safe_to_repeat_is_repeated(
    flaky: tuple[Flaky, str], call: Callable[[Client], object]
) -> None:
    server, address = flaky
    server.failures = 2
    with Client(address, retry=FakeTime().policy()) as client:
        call(client)
    assert len(server.calls) == 3 and len(set(server.calls)) == 1


@pytest.mark.parametrize("call", list(UNSAFE.values()), ids=list(UNSAFE))
def test_a_call_not_safe_to_repeat_is_raised_at_once(
    flaky: tuple[Flaky, str], call: Callable[[Client], object]
) -> None:
    server, address = flaky
    server.failures = 1
    time = FakeTime()
    with Client(address, retry=time.policy()) as client, pytest.raises(UnavailableError):
        call(client)
    assert (len(server.calls), time.slept) == (1, [])


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN,
     grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND],
)  # fmt: skip
def test_no_code_but_unavailable_is_repeated(
    flaky: tuple[Flaky, str], code: grpc.StatusCode
) -> None:
    server, address = flaky
    server.failures, server.code = 1, code
    with (
        Client(address, retry=FakeTime().policy()) as client,
        pytest.raises(ClientError) as failure,
    ):
        client.get_task("t")
    assert failure.value.code is code and server.calls == ["GetTask"]
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        assert isinstance(failure.value, DeadlineExceededError)


# The asyncio client, the same way


async def test_async_a_read_is_repeated_with_the_waits_of_the_backoff(
    flaky: tuple[Flaky, str],
) -> None:
    server, address = flaky
    server.failures = 3
    time = FakeTime()
    retry = time.policy(attempts=4, initial_backoff_s=0.2, jitter="none")
    async with AsyncClient(address, retry=retry) as client:
        await client.get_schedule("s")
        await client.cancel_task("t")  # answered at once now
    assert server.calls == ["GetSchedule"] * 4 + ["CancelTask"]
    assert time.slept == pytest.approx([0.2, 0.4, 0.8])


async def test_async_attempts_and_timeout_bound_the_call(flaky: tuple[Flaky, str]) -> None:
    server, address = flaky
    server.failures = 100
    time = FakeTime()
    retry = time.policy(attempts=3, initial_backoff_s=0.1, jitter="none")
    async with AsyncClient(address, retry=retry, timeout=None) as client:
        with pytest.raises(UnavailableError):
            await client.get_task("t")
    assert len(server.calls) == 3 and time.slept == pytest.approx([0.1, 0.2])
    retry = time.policy(attempts=10, initial_backoff_s=0.3, jitter="none")
    async with AsyncClient(address, retry=retry, timeout=0.5) as client:
        with pytest.raises(UnavailableError):
            await client.get_task("t")
    assert len(server.calls) == 3 + 2  # 0.3 s waited; 0.3 + 0.6 would pass the 0.5 s
    assert time.slept[2:] == pytest.approx([0.3])


async def test_async_unsafe_calls_and_other_codes_are_raised_at_once(
    flaky: tuple[Flaky, str],
) -> None:
    server, address = flaky
    server.failures = 2
    time = FakeTime()
    async with AsyncClient(address, retry=time.policy()) as client:
        with pytest.raises(UnavailableError):
            await client.create_task(TaskSpec("q", "h"))  # no task id
        with pytest.raises(UnavailableError):
            await client.trigger_schedule("s")
        server.failures, server.code = 3, grpc.StatusCode.INTERNAL
        with pytest.raises(ClientError) as failure:
            await client.get_task("t")
    assert failure.value.code is grpc.StatusCode.INTERNAL
    assert (server.calls, time.slept) == (["CreateTask", "TriggerSchedule", "GetTask"], [])


# A real tikk server whose store writes a create and then loses its answer


class LosingStore(SqliteTaskStore):
    """The embedded store, whose first ``lose`` creates are written and then answered as
    if the store had not answered in time."""

    lose = 1

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        outcomes = await super().create_many(tasks, new_ids=new_ids)
        if self.lose > 0:
            self.lose -= 1
            raise BackendUnavailable("the store did not answer in time")
        return outcomes


async def test_a_create_with_an_id_whose_answer_was_lost_is_stored_once(tmp_path: Path) -> None:
    settings = embedded_settings(tmp_path)
    store = LosingStore(str(tmp_path / "tikk.db"), settings.shard_count)
    await store.start()
    time = FakeTime()
    try:
        async with (
            embedded_api(settings, store=store) as served,
            AsyncClient(served.address, retry=time.policy()) as client,
        ):
            first = await client.create_task(TaskSpec("q", "h", task_id="once", run_at=LATER))
            store.lose = 1
            blocking = await asyncio.to_thread(_create_blocking, served.address, time)
            tasks = [t.id async for t in client.list_tasks("q")]
    finally:
        await store.close()
    assert (first.task.id, first.created) == ("once", False)  # the lost attempt made it
    assert (blocking.task.id, blocking.created) == ("twice", False)
    assert sorted(tasks) == ["once", "twice"] and len(time.slept) == 2


def _create_blocking(address: str, time: FakeTime) -> Any:
    with Client(address, retry=time.policy()) as client:
        return client.create_task(TaskSpec("q", "h", task_id="twice", run_at=LATER))
