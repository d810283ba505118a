"""The RunHistory contract (history.run_history), run against every backend."""

from __future__ import annotations

from dataclasses import replace

import pytest

from history.run_history import RunHistory
from tests.factories import T0, make_run
from tikk.errors import BackendUnavailable, InvalidArgument, NotFound
from tikk.model import RunQuery, RunStatus
from tikk.schedules.model import OccurrenceQuery, OccurrenceRecord, Outcome


async def test_ping_answers_while_open_and_is_unavailable_once_closed(
    history: RunHistory,
) -> None:
    await history.ping()
    await history.ping()  # idempotent, and it wrote nothing a listing would see
    assert (await history.list_for_task("default", "t", 10, "")).items == []
    await history.close()  # the fixture closes it again: close is idempotent
    with pytest.raises(BackendUnavailable):
        await history.ping()


async def test_append_then_get(history: RunHistory) -> None:
    run = make_run("r1")
    await history.append(run)
    assert await history.get("default", "r1") == run
    with pytest.raises(NotFound):
        await history.get("other-namespace", "r1")


async def test_append_of_the_same_run_twice_stores_one_record(history: RunHistory) -> None:
    first = make_run("r1", status=RunStatus.SUCCEEDED)
    await history.append(first)
    await history.append(first)
    assert await history.get("default", "r1") == first
    page = await history.list_for_task("default", "t1", 10, "")
    assert len(page.items) == 1


async def test_append_many_stores_each_run_once(history: RunHistory) -> None:
    runs = [make_run(f"r{i}", finished_ms=T0 + i) for i in range(5)]
    await history.append_many(runs)
    await history.append_many(runs[3:])  # a burst reported again after a lost ack
    assert [await history.get("default", r.run_id) for r in runs] == runs
    page = await history.list_for_task("default", "t1", 10, "")
    assert [r.run_id for r in page.items] == ["r4", "r3", "r2", "r1", "r0"]
    await history.append_many([])


async def test_runs_of_a_task_newest_first_with_paging(history: RunHistory) -> None:
    for i in range(5):
        await history.append(make_run(f"r{i}", finished_ms=T0 + i * 1000, attempt=i + 1))
    await history.append(make_run("other", task_id="t2"))
    p1 = await history.list_for_task("default", "t1", 2, "")
    p2 = await history.list_for_task("default", "t1", 2, p1.next_token)
    p3 = await history.list_for_task("default", "t1", 2, p2.next_token)
    ids = [r.run_id for p in (p1, p2, p3) for r in p.items]
    assert ids == ["r4", "r3", "r2", "r1", "r0"]
    assert p3.next_token == ""


async def test_runs_by_queue_time_range_and_status(history: RunHistory) -> None:
    await history.append(make_run("old", finished_ms=T0 - 7_200_000, status=RunStatus.FAILED))
    await history.append(make_run("f1", finished_ms=T0 - 60_000, status=RunStatus.FAILED))
    await history.append(make_run("ok", finished_ms=T0 - 30_000))
    await history.append(make_run("d1", finished_ms=T0 - 10_000, status=RunStatus.DEAD_LETTERED))
    await history.append(make_run("q2", finished_ms=T0 - 5_000, queue="q2"))
    hour = RunQuery("default", "q", T0 - 3_600_000, T0)
    all_runs = await history.list_by_queue(hour, 100, "")
    assert [r.run_id for r in all_runs.items] == ["d1", "ok", "f1"]
    failed = RunQuery("default", "q", T0 - 3_600_000, T0, RunStatus.FAILED)
    assert [r.run_id for r in (await history.list_by_queue(failed, 100, "")).items] == ["f1"]
    # The end of the range is exclusive.
    edge = RunQuery("default", "q", T0 - 60_000, T0 - 30_000)
    assert [r.run_id for r in (await history.list_by_queue(edge, 100, "")).items] == ["f1"]


async def test_queue_listing_pages(history: RunHistory) -> None:
    for i in range(7):
        await history.append(make_run(f"r{i}", task_id=f"t{i}", finished_ms=T0 - i))
    query = RunQuery("default", "q", T0 - 100, T0 + 1)
    seen: list[str] = []
    token = ""
    while True:
        page = await history.list_by_queue(query, 3, token)
        seen += [r.run_id for r in page.items]
        token = page.next_token
        if not token:
            break
    assert seen == [f"r{i}" for i in range(7)]


async def test_bad_page_token_is_invalid_argument(history: RunHistory) -> None:
    with pytest.raises(InvalidArgument) as info:
        await history.list_for_task("default", "t1", 10, "not-a-token!")
    assert info.value.field == "page_token"


def _occ(nominal_ms: int, outcome: Outcome, schedule_id: str = "s1") -> OccurrenceRecord:
    return OccurrenceRecord(
        namespace="default", schedule_id=schedule_id, nominal_ms=nominal_ms,
        fire_ms=nominal_ms + 5, outcome=outcome, decided_ms=nominal_ms + 70_000,
        task_id=f"{schedule_id}@{nominal_ms}" if outcome is Outcome.FIRED else "",
        reason="why",
    )  # fmt: skip


DAY = 86_400_000


async def test_occurrences_newest_first_across_days_with_paging(history: RunHistory) -> None:
    # Over three days, so a backend that buckets by day must walk its buckets.
    records = [_occ(T0 + k * DAY // 2, Outcome.FIRED, "days") for k in range(6)]
    await history.record_occurrences(records)
    await history.record_occurrences([_occ(T0, Outcome.FIRED, schedule_id="other")])
    query = OccurrenceQuery("default", "days", T0, T0 + 3 * DAY)
    seen: list[OccurrenceRecord] = []
    token = ""
    while True:
        page = await history.list_occurrences(query, 4, token)
        seen += page.items
        token = page.next_token
        if not token:
            break
    assert seen == list(reversed(records))
    assert seen[0].lateness_ms == 70_000 - 5


async def test_occurrence_records_are_idempotent_per_outcome(history: RunHistory) -> None:
    missed, backfilled = _occ(T0, Outcome.MISSED, "twice"), _occ(T0, Outcome.BACKFILLED, "twice")
    await history.record_occurrences([missed, missed])
    await history.record_occurrences([missed, backfilled])
    query = OccurrenceQuery("default", "twice", T0, T0 + 1)
    page = await history.list_occurrences(query, 10, "")
    assert sorted(r.outcome for r in page.items) == [Outcome.MISSED, Outcome.BACKFILLED]


async def test_occurrences_filter_by_outcome_and_range(history: RunHistory) -> None:
    await history.record_occurrences(
        [_occ(T0 + k * 1000, Outcome.MISSED if k % 2 else Outcome.FIRED, "f") for k in range(10)]
    )
    query = OccurrenceQuery("default", "f", T0 + 2000, T0 + 8000, Outcome.MISSED)
    page = await history.list_occurrences(query, 100, "")
    assert [r.nominal_ms for r in page.items] == [T0 + 7000, T0 + 5000, T0 + 3000]


async def test_a_sparse_month_is_walked_page_by_page(history: RunHistory) -> None:
    # Runs at both ends of a 31-day range, nothing between: every run is found by following
    # the tokens, and no call reads more than a bounded number of partitions (a backend
    # that walks time buckets answers short pages with a token before the range is done).
    day = 86_400_000
    start, end = T0 - 31 * day, T0
    await history.append(make_run("newest", task_id="a", finished_ms=end - 1))
    await history.append(make_run("oldest", task_id="b", finished_ms=start))
    query = RunQuery("default", "q", start, end)
    seen: list[str] = []
    token, calls = "", 0
    while True:
        page = await history.list_by_queue(query, 10, token)
        calls += 1
        seen += [r.run_id for r in page.items]
        token = page.next_token
        if not token or calls > 1_000:
            break
    assert seen == ["newest", "oldest"]
    assert not token


YEAR_9999_MS = 253_402_300_799_000


async def test_runs_are_found_by_the_time_the_server_recorded_them(history: RunHistory) -> None:
    """A worker's finish time is its own (year 9999, or nothing): a query of the last hour
    finds a run by when the server recorded it, and the worker's times read back as given."""
    hour_ago = T0 - 3_600_000
    far = make_run("far", finished_ms=YEAR_9999_MS, recorded_ms=T0 - 60_000)
    zero = make_run("zero", finished_ms=0, recorded_ms=T0 - 30_000, status=RunStatus.FAILED)
    stale = make_run("stale", finished_ms=T0 - 10_000, recorded_ms=hour_ago - 1)
    await history.append_many([far, zero, stale])
    last_hour = await history.list_by_queue(RunQuery("default", "q", hour_ago, T0), 10, "")
    assert [r.run_id for r in last_hour.items] == ["zero", "far"]
    failed = RunQuery("default", "q", hour_ago, T0, RunStatus.FAILED)
    assert [r.run_id for r in (await history.list_by_queue(failed, 10, "")).items] == ["zero"]
    assert await history.get("default", "far") == far
    assert (await history.get("default", "zero")).finished_ms == 0
    future = RunQuery("default", "q", YEAR_9999_MS - 3_600_000, YEAR_9999_MS + 1)
    assert (await history.list_by_queue(future, 10, "")).items == []
    # A task's runs come newest recorded first, and page by that time.
    first = await history.list_for_task("default", "t1", 2, "")
    rest = await history.list_for_task("default", "t1", 2, first.next_token)
    assert [r.run_id for r in first.items + rest.items] == ["zero", "far", "stale"]


async def test_a_failed_runs_traceback_reads_back_whole_everywhere(history: RunHistory) -> None:
    trace = (
        "Traceback (most recent call last):\n"
        '  File "billing.py", line 12, in charge\n'
        "    raise TimeoutError('gateway \u00e9 \\x1b[31m')\n"
        "TimeoutError: gateway\n"
    ) + "  frame\n" * 2_000
    run = replace(make_run("r1", status=RunStatus.FAILED, finished_ms=T0 - 1_000), traceback=trace)
    await history.append(run)
    assert (await history.get("default", "r1")).traceback == trace
    by_task = await history.list_for_task("default", "t1", 10, "")
    by_queue = await history.list_by_queue(RunQuery("default", "q", T0 - 60_000, T0), 10, "")
    assert by_task.items == [run] and by_queue.items == [run]


async def test_runs_recorded_before_a_time_are_pruned(history: RunHistory) -> None:
    for i in range(4):
        await history.append(make_run(f"r{i}", finished_ms=T0 + i * 1000))
    await history.append(make_run("other", namespace="ns2", finished_ms=T0))
    deleted = await history.prune("default", T0 + 2_500, 10)
    assert deleted in (0, 3)  # 0: a backend whose rows expire by themselves (TTL)
    runs = await history.list_for_task("default", "t1", 10, "")
    assert len(runs.items) == 4 - deleted and runs.items[0].run_id == "r3"
    assert (await history.get("ns2", "other")).run_id == "other"
