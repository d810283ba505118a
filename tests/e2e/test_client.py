"""The Python client (blocking and asyncio) against a real ``tikk dev`` process and a real
worker: every method group, the error tree, and imports that are cut and resumed."""

from __future__ import annotations

import itertools
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from tests.e2e.conftest import Stack
from tests.e2e.test_cli import tikk
from tests.waiting import eventually
from tikk.client import (
    AlreadyExistsError,
    AsyncClient,
    Client,
    ClientError,
    ConflictError,
    FailedPreconditionError,
    ImportInterrupted,
    ImportResult,
    InvalidArgumentError,
    Listing,
    NotFoundError,
    Page,
    Recurrence,
    RetryOptions,
    ScheduleDefinition,
    TaskSpec,
    UnavailableError,
)
from tikk.v1 import history_pb2, schedules_pb2, tasks_pb2

pytestmark = pytest.mark.e2e

LATER = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(days=365)
NO_RETRY = RetryOptions(max_attempts=1)
FAST_RETRY = RetryOptions(
    max_attempts=2, initial_backoff=timedelta(milliseconds=200), multiplier=1.5, jitter=0.0
)


def later(task_id: str, queue: str = "parked") -> TaskSpec:
    """A task due in a year, on a queue no worker of these tests consumes."""
    return TaskSpec(queue, "record", b"x", task_id=task_id, run_at=LATER)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# Tasks


def test_tasks_through_the_blocking_client(stack: Stack, ns: str) -> None:
    with Client(stack.address, namespace=ns) as tikk:
        first = tikk.create_task(later("a"))
        assert first.created and first.task.namespace == ns and first.task.due_time.seconds
        assert tikk.create_task(later("a")).created is False
        with pytest.raises(AlreadyExistsError):
            tikk.create_task(TaskSpec("parked", "other", task_id="a", run_at=LATER))
        for n in range(4):
            tikk.create_task(later(f"b{n}"))
        listed = tikk.list_tasks("parked", state="scheduled", page_size=2)
        assert isinstance(listed, Iterator)
        assert sorted(t.id for t in listed) == ["a", "b0", "b1", "b2", "b3"]
        assert tikk.cancel_task("b0").state == tasks_pb2.TASK_STATE_CANCELLED
        assert [t.id for t in tikk.list_tasks("parked", state="cancelled")] == ["b0"]
        assert tikk.get_task("b0").state == tasks_pb2.TASK_STATE_CANCELLED


async def test_tasks_through_the_asyncio_client(stack: Stack, ns: str) -> None:
    async with AsyncClient(stack.address, namespace=ns) as tikk:
        made = await tikk.create_task(
            TaskSpec("e2e", "record", "hi", task_id="now", labels={"team": "a"})
        )
        assert made.created and made.task.labels == {"team": "a"}
        eventually(lambda: _state(stack, ns, "now") == tasks_pb2.TASK_STATE_SUCCEEDED)
        with pytest.raises(FailedPreconditionError):
            await tikk.cancel_task("now")
        for n in range(3):
            await tikk.create_task(later(f"c{n}"))
        ids = [t.id async for t in tikk.list_tasks("parked", page_size=2)]
        assert sorted(ids) == ["c0", "c1", "c2"]
        assert (await tikk.get_task("c1")).state == tasks_pb2.TASK_STATE_SCHEDULED


def _state(stack: Stack, ns: str, task_id: str) -> int:
    return stack.task(ns, task_id).state


def test_queues_are_listed_by_both_clients(stack: Stack, ns: str) -> None:
    with Client(stack.address, namespace=ns) as tikk:
        tikk.create_task(later("q", queue="listed-queue"))
        names = [q.name for q in tikk.list_queues(page_size=1)]
    assert "listed-queue" in names and names == sorted(names)


async def test_queues_are_listed_by_the_asyncio_client(stack: Stack, ns: str) -> None:
    async with AsyncClient(stack.address, namespace=ns) as tikk:
        await tikk.create_task(later("q", queue="listed-async"))
        waiting = {q.name: q.waiting async for q in tikk.list_queues()}
    assert "listed-async" in waiting


# One page at a time


def test_a_listing_fetches_one_page_at_a_time_by_its_token(stack: Stack, ns: str) -> None:
    with Client(stack.address, namespace=ns) as tikk:
        for n in range(5):
            tikk.create_task(later(f"p{n}"))
        listing = tikk.list_tasks("parked", page_size=2)
        assert isinstance(listing, Listing)
        pages = [listing.page()]
        while pages[-1].next_page_token and len(pages) < 5:
            pages.append(listing.page(pages[-1].next_page_token))
        # The iteration is the listing's own: fetching pages left it at the start.
        walked = [t.id for t in listing]
        again = listing.page(pages[1].next_page_token)
        with pytest.raises(InvalidArgumentError, match="page"):
            listing.page("not a token")
    assert [len(p.items) for p in pages] == [2, 2, 1]
    assert all(isinstance(p, Page) for p in pages)
    assert [t.id for p in pages for t in p.items] == walked and sorted(walked) == [
        "p0", "p1", "p2", "p3", "p4",
    ]  # fmt: skip
    assert again.items == pages[2].items and again.next_page_token == ""
    # The whole answer, as the server sent it.
    assert isinstance(pages[0].response, tasks_pb2.ListTasksResponse)
    assert list(pages[0].response.tasks) == pages[0].items
    assert pages[0].response.next_page_token == pages[0].next_page_token


async def test_an_asyncio_listing_fetches_one_page_at_a_time(stack: Stack, ns: str) -> None:
    async with AsyncClient(stack.address, namespace=ns) as tikk:
        for name in ("x", "y", "z"):
            await tikk.create_schedule(ScheduleDefinition(name, HOURLY, "e2e", "record"))
        listing = tikk.list_schedules(page_size=2)
        first = await listing.page()
        last = await listing.page(first.next_page_token)
        walked = [s.id async for s in listing]
        empty = await tikk.list_dead_letters(queue="nothing-here").page()
    assert [s.id for s in first.items] == ["x", "y"] and first.next_page_token
    assert [s.id for s in last.items] == ["z"] and last.next_page_token == ""
    assert isinstance(last.response, schedules_pb2.ListSchedulesResponse)
    assert walked == ["x", "y", "z"]
    assert (empty.items, empty.next_page_token) == ([], "")
    assert isinstance(empty.response, history_pb2.ListDeadLettersResponse)


# Run history and dead letters


def test_history_and_dead_letters_through_the_blocking_client(stack: Stack, ns: str) -> None:
    start = datetime.now(tz=UTC) - timedelta(seconds=5)
    with Client(stack.address, namespace=ns) as tikk:
        tikk.create_task(TaskSpec("e2e", "record", task_id="ok"))
        tikk.create_task(TaskSpec("e2e", "always_fail", task_id="doomed", retry=FAST_RETRY))
        eventually(lambda: [t.id for t in tikk.list_dead_letters(queue="e2e")] == ["doomed"])
        eventually(lambda: _state(stack, ns, "ok") == tasks_pb2.TASK_STATE_SUCCEEDED)
        runs = list(tikk.list_task_runs("doomed", page_size=1))
        assert [r.status for r in runs] == [
            history_pb2.RUN_STATUS_DEAD_LETTERED, history_pb2.RUN_STATUS_FAILED,
        ]  # fmt: skip
        assert tikk.get_run(runs[0].run_id).error_message == "never works"
        end = datetime.now(tz=UTC) + timedelta(seconds=1)
        failed = list(tikk.list_runs("e2e", start=start, end=end, status="dead_lettered"))
        assert [r.task_id for r in failed] == ["doomed"]
        every = {r.task_id for r in tikk.list_runs("e2e", start=start, end=end)}
        assert every == {"ok", "doomed"}
        assert tikk.redrive_task("doomed").attempt == 1
        eventually(lambda: len(list(tikk.list_task_runs("doomed"))) == 4)


async def test_history_and_dead_letters_through_the_asyncio_client(stack: Stack, ns: str) -> None:
    async with AsyncClient(stack.address, namespace=ns) as tikk:
        await tikk.create_task(TaskSpec("e2e", "always_fail", task_id="d", retry=NO_RETRY))
        eventually(lambda: _state(stack, ns, "d") == tasks_pb2.TASK_STATE_DEAD_LETTERED)
        assert [t.id async for t in tikk.list_dead_letters()] == ["d"]
        (run,) = [r async for r in tikk.list_task_runs("d")]
        assert (await tikk.get_run(run.run_id)).task_id == "d"
        recent = [r.task_id async for r in tikk.list_runs("e2e", status="dead_lettered")]
        assert recent == ["d"]
        assert (await tikk.redrive_task("d")).state == tasks_pb2.TASK_STATE_SCHEDULED


# Schedules

HOURLY = Recurrence(every=timedelta(hours=1))
DAILY_OSLO = Recurrence(cron="0 9 * * *", timezone="Europe/Oslo")
MARCH_1 = datetime(2026, 3, 1, 8, tzinfo=UTC)  # 09:00 in Oslo (CET)


def test_schedules_through_the_blocking_client(stack: Stack, ns: str) -> None:
    with Client(stack.address, namespace=ns) as tikk:
        made = tikk.create_schedule(ScheduleDefinition("daily", DAILY_OSLO, "e2e", "record"))
        assert made.version == "1" and made.spec.timezone == "Europe/Oslo"
        assert [s.id for s in tikk.list_schedules(page_size=1)] == ["daily"]
        stored = tikk.preview_schedule("daily", count=3)
        assert len(stored) == 3 and all("09:00:00" in o.local_time for o in stored)
        assert stored[0].nominal_time == made.next_nominal_time
        task = tikk.trigger_schedule("daily")
        assert task.schedule_id == "daily" and task.id.startswith("daily@")
        first = tikk.backfill_schedule("daily", MARCH_1, MARCH_1 + timedelta(days=3))
        again = tikk.backfill_schedule("daily", MARCH_1, MARCH_1 + timedelta(days=3))
        assert (first.created, first.existing, again.created, again.existing) == (3, 0, 0, 3)
        past = tikk.list_schedule_occurrences(
            "daily", start=MARCH_1, end=MARCH_1 + timedelta(days=3), outcome="backfilled"
        )
        assert len(list(past)) == 3
        assert tikk.pause_schedule("daily", note="deploy").pause_note == "deploy"
        assert tikk.resume_schedule("daily").paused is False
        tikk.delete_schedule("daily")
        with pytest.raises(NotFoundError):
            tikk.get_schedule("daily")


async def test_schedules_through_the_asyncio_client(stack: Stack, ns: str) -> None:
    async with AsyncClient(stack.address, namespace=ns) as tikk:
        hourly = ScheduleDefinition("h", HOURLY, "e2e", "record", catch_up="skip")
        made = await tikk.create_schedule(hourly)
        assert made.policy.catch_up == 1  # CATCH_UP_POLICY_SKIP
        with pytest.raises(ConflictError):
            await tikk.update_schedule(hourly, expected_version="7")
        every_5 = ScheduleDefinition("h", Recurrence(cron="*/5 * * * *"), "e2e", "record")
        updated = await tikk.update_schedule(every_5, expected_version=made.version)
        assert (updated.version, updated.spec.cron) == ("2", "*/5 * * * *")
        assert (await tikk.get_schedule("h")).spec.cron == "*/5 * * * *"
        assert [s.id async for s in tikk.list_schedules()] == ["h"]
        ahead = await tikk.preview_schedule(HOURLY, after=MARCH_1, count=2)
        assert [o.nominal_time.ToDatetime(tzinfo=UTC) for o in ahead] == [
            MARCH_1 + timedelta(hours=1), MARCH_1 + timedelta(hours=2),
        ]  # fmt: skip
        task = await tikk.trigger_schedule("h")
        eventually(lambda: _state(stack, ns, task.id) == tasks_pb2.TASK_STATE_SUCCEEDED)
        outcomes = [o.outcome async for o in tikk.list_schedule_occurrences("h")]
        assert outcomes == [history_pb2.OCCURRENCE_OUTCOME_TRIGGERED]
        ten_minutes = await tikk.backfill_schedule("h", MARCH_1, MARCH_1 + timedelta(minutes=10))
        assert (ten_minutes.created, ten_minutes.existing) == (2, 0)
        paused = await tikk.pause_schedule("h")
        assert paused.paused and paused.version != updated.version
        with pytest.raises(ConflictError):
            await tikk.delete_schedule("h", expected_version=updated.version)
        await tikk.delete_schedule("h", expected_version=paused.version)
        with pytest.raises(NotFoundError):
            await tikk.get_schedule("h")


# Errors


def test_statuses_become_the_client_error_tree(stack: Stack, ns: str) -> None:
    with Client(stack.address, namespace=ns) as tikk:
        with pytest.raises(NotFoundError) as missing:
            tikk.get_task("nope")
        assert missing.value.code is grpc.StatusCode.NOT_FOUND and not missing.value.retriable
        with pytest.raises(InvalidArgumentError, match="handler"):
            tikk.create_task(TaskSpec("parked", ""))
        with pytest.raises(InvalidArgumentError, match="queue"):
            list(tikk.list_tasks("no spaces"))
    with pytest.raises(ValueError, match="timezone-aware"):
        TaskSpec("q", "h", run_at=datetime(2030, 1, 1))
    with Client(stack.address) as tikk:
        with pytest.raises(ValueError, match="unknown task state"):
            tikk.list_tasks("q", state="sleeping")
        with pytest.raises(ValueError, match="window must be at least 1"):
            tikk.import_tasks([], window=0)
        # One batch in flight at a time: each is answered without waiting for the next.
        one_by_one = [TaskSpec("parked", "h", run_at=datetime(2030, 1, 1, tzinfo=UTC))] * 3
        answers = list(tikk.import_tasks(one_by_one, batch_size=1, window=1))
        assert [(a.index, a.created) for a in answers] == [(0, True), (1, True), (2, True)]


async def test_an_unreachable_server_is_unavailable_and_retriable() -> None:
    address = f"127.0.0.1:{free_port()}"
    async with AsyncClient(address, timeout=5) as tikk:
        with pytest.raises(UnavailableError) as down:
            await tikk.get_task("x")
        with pytest.raises(ImportInterrupted) as cut:
            [r async for r in tikk.import_tasks(specs(0, 10))]
    assert down.value.retriable and isinstance(down.value, ClientError)
    assert (cut.value.code, cut.value.answered, cut.value.next_index) == (
        grpc.StatusCode.UNAVAILABLE, 0, 0,
    )  # fmt: skip
    with Client(address, timeout=5) as blocking, pytest.raises(ImportInterrupted) as broken:
        list(blocking.import_tasks([later("x")]))
    assert (broken.value.code, broken.value.next_index) == (grpc.StatusCode.UNAVAILABLE, 0)
    assert broken.value.retriable


# Imports


def specs(start: int, stop: int, prefix: str = "i") -> Iterator[TaskSpec]:
    return (later(f"{prefix}-{n}", queue="bulk") for n in range(start, stop))


def test_an_import_answers_every_item_in_order_refusals_included(stack: Stack, ns: str) -> None:
    items = [later("ok-0"), TaskSpec("parked", "", task_id="no-handler"), later("ok-2")]
    with Client(stack.address, namespace=ns) as tikk:
        results = list(tikk.import_tasks(items, batch_size=2))
        oversized = list(tikk.import_tasks(specs(0, 5_001, "big"), batch_size=5_001))
    assert [(r.index, r.task_id, r.ok, r.created) for r in results] == [
        (0, "ok-0", True, True), (1, "no-handler", False, False), (2, "ok-2", True, True),
    ]  # fmt: skip
    assert results[1].code is grpc.StatusCode.INVALID_ARGUMENT and "handler" in results[1].message
    # A whole batch over the server's limit is refused item by item, and nothing is stored.
    assert len(oversized) == 5_001 and oversized[-1].task_id == "big-5000"
    assert {r.code for r in oversized} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert "5,000" in oversized[0].message


def test_a_failing_input_is_raised_after_the_items_before_it_are_answered(
    stack: Stack, ns: str
) -> None:
    def truncated() -> Iterator[TaskSpec]:
        yield from specs(0, 1_500)
        raise OSError("input file truncated")

    answered: list[ImportResult] = []
    with Client(stack.address, namespace=ns) as tikk, pytest.raises(OSError, match="truncated"):
        answered.extend(tikk.import_tasks(truncated(), batch_size=1_000))
    assert [r.index for r in answered] == list(range(1_500)) and all(r.ok for r in answered)


def test_an_import_reads_its_input_only_as_the_server_answers(stack: Stack, ns: str) -> None:
    pulled = itertools.count()

    def endless() -> Iterator[TaskSpec]:
        for n in itertools.count():
            next(pulled)
            yield later(f"e-{n}")

    with Client(stack.address, namespace=ns) as tikk:
        results = tikk.import_tasks(endless(), batch_size=100)
        taken = list(itertools.islice(results, 1_000))
        results.close()  # cancels the stream
        assert tikk.get_task("e-999").id == "e-999"
    assert [r.index for r in taken] == list(range(1_000)) and all(r.ok for r in taken)
    # Ten batches answered, four more at most in flight: the endless input was never buffered.
    assert next(pulled) <= 1_400


async def test_an_asyncio_import_reads_an_async_input_as_the_server_answers(
    stack: Stack, ns: str
) -> None:
    pulled: list[int] = []

    async def endless() -> AsyncIterator[TaskSpec]:
        for n in itertools.count():
            pulled.append(n)
            yield later(f"a-{n}")

    async with AsyncClient(stack.address, namespace=ns) as tikk:
        results = tikk.import_tasks(endless(), batch_size=100)
        taken = [r async for r in _first(results, 1_000)]
        await results.aclose()
        again = [r async for r in tikk.import_tasks(specs(0, 10, "a"), first_index=5)]
    assert [r.index for r in taken] == list(range(1_000)) and all(r.created for r in taken)
    assert len(pulled) <= 1_400
    assert [(r.index, r.task_id, r.created) for r in again[:2]] == [
        (5, "a-0", False),
        (6, "a-1", False),
    ]
    assert sum(r.created for r in again) == 0 and len(again) == 10


async def _first(results: AsyncIterator[ImportResult], count: int) -> AsyncIterator[ImportResult]:
    async for r in results:
        yield r
        count -= 1
        if not count:
            return


@pytest.fixture
def own(tmp_path: Path) -> Iterator[Stack]:
    """A server of this test's own (no worker), which the test may kill."""
    s = Stack(tmp_path)
    s.start_server()
    yield s
    s.close()


def test_an_import_cut_by_a_server_kill_resumes_and_creates_nothing_twice(own: Stack) -> None:
    count, size = 20_000, 500
    answered: list[ImportResult] = []
    with Client(own.address, namespace="resume") as tikk, pytest.raises(ImportInterrupted) as cut:
        for r in tikk.import_tasks(specs(0, count, "k"), batch_size=size):
            answered.append(r)
            if len(answered) == 3_000:
                assert own.server is not None
                own.server.kill9()
    err = cut.value
    assert err.code is grpc.StatusCode.UNAVAILABLE and err.retriable
    assert err.next_index == err.answered == len(answered) and 3_000 <= err.next_index < count
    assert [r.index for r in answered] == list(range(err.next_index))
    assert all(r.ok and r.created for r in answered)

    own.start_server()
    with Client(own.address, namespace="resume") as tikk:
        rest = tikk.import_tasks(specs(err.next_index, count, "k"), first_index=err.next_index)
        resumed = list(rest)
        assert [r.index for r in resumed] == list(range(err.next_index, count))
        assert all(r.ok for r in resumed)
        # Only what the broken stream had in flight (its window) was already stored.
        assert all(r.index < err.next_index + 4 * size for r in resumed if not r.created)
        again = list(tikk.import_tasks(specs(0, count, "k"), batch_size=5_000))
        stored = {t.id for t in tikk.list_tasks("bulk", page_size=1_000)}
    assert len(again) == count and not any(r.created for r in again)
    assert stored == {f"k-{n}" for n in range(count)}


@pytest.mark.timeout(300)
def test_a_quarter_million_tasks_in_one_stream_come_back_by_id(stack: Stack, ns: str) -> None:
    count = 250_000
    with Client(stack.address, namespace=ns) as tikk:
        expected = 0
        for r in tikk.import_tasks(specs(0, count, "m"), batch_size=5_000):
            assert (r.index, r.task_id, r.ok, r.created) == (expected, f"m-{expected}", True, True)
            expected += 1
        assert expected == count
        stored = {t.id for t in tikk.list_tasks("bulk", state="scheduled", page_size=1_000)}
    assert stored == {f"m-{n}" for n in range(count)}


def test_the_cli_import_runs_on_the_client_and_says_where_to_resume(tmp_path: Path) -> None:
    source = tmp_path / "tasks.jsonl"
    source.write_text('{"task_id": "a", "queue": "q", "handler": "h"}\n')
    args = ["task", "import", str(source), "--rejects", str(tmp_path / "rejects.jsonl")]
    down = tikk(f"127.0.0.1:{free_port()}", *args)
    assert down.returncode == 3, down.stderr
    assert "resume with --skip 0" in down.stderr and "UNAVAILABLE" in down.stderr
