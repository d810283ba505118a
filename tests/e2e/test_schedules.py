"""Recurring schedules on real processes: ``tikk dev`` (server + dispatcher), a ``tikk worker``,
and the CLI, on the embedded stack with the real clock."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from tests.e2e.conftest import Stack
from tests.e2e.test_cli import tikk, tikk_json
from tests.waiting import eventually
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, schedules_pb2, schedules_pb2_grpc, tasks_pb2

pytestmark = pytest.mark.e2e


def _schedules(stack: Stack) -> Any:
    return schedules_pb2_grpc.ScheduleServiceStub(stack._channel)


def _runs_of(stack: Stack, ns: str, sid: str) -> list[dict[str, Any]]:
    return [
        e for e in stack.executions()
        if e["namespace"] == ns and e["task_id"].startswith(f"{sid}@")
    ]  # fmt: skip


def _nominal(execution: dict[str, Any]) -> int:
    return int(execution["key"].rsplit("@", 1)[1])


def _settled(stack: Stack, ns: str, sid: str) -> bool:
    """Whether every task the schedule created has finished (run, or dead-lettered): an
    occurrence already on its way when the schedule stopped has landed."""
    req = tasks_pb2.ListTasksRequest(namespace=ns, queue="e2e", page_size=1000)
    unfinished = (tasks_pb2.TASK_STATE_SCHEDULED, tasks_pb2.TASK_STATE_DISPATCHED)
    tasks = stack.tasks.ListTasks(req, timeout=10).tasks
    return not [t for t in tasks if t.id.startswith(f"{sid}@") and t.state in unfinished]


def _outcomes(stack: Stack, ns: str, sid: str) -> list[str]:
    req = history_pb2.ListScheduleOccurrencesRequest(namespace=ns, schedule_id=sid, page_size=500)
    resp = stack.history.ListScheduleOccurrences(req, timeout=10)
    return [history_pb2.OccurrenceOutcome.Name(o.outcome) for o in resp.occurrences]


def test_every_second_schedule_runs_each_second_once(stack: Stack, ns: str) -> None:
    created = tikk_json(
        stack.address, "schedule", "create", "beat", "--every", "1s", "--queue", "e2e",
        "--handler", "record", "--namespace", ns,
    )  # fmt: skip
    assert created["version"] == "1" and created["spec"]["interval"] == "1s"
    runs = eventually(lambda: (r := _runs_of(stack, ns, "beat")) and len(r) >= 6 and r, 30)
    nominal = sorted(_nominal(e) for e in runs)
    assert len(set(nominal)) == len(nominal)  # no occurrence ran twice
    assert all(b - a == 1_000 for a, b in itertools.pairwise(nominal))
    # Never before the occurrence's instant; the worker sees the occurrence's key.
    assert all(e["started_ms"] >= _nominal(e) for e in runs)
    assert all(e["key"] == f"{ns}/beat@{_nominal(e)}" for e in runs)
    assert _outcomes(stack, ns, "beat").count("OCCURRENCE_OUTCOME_FIRED") >= 6
    listed = tikk_json(stack.address, "schedule", "list", "--namespace", ns)
    assert [s["id"] for s in listed["schedules"]] == ["beat"]

    # Paused: nothing new starts (one occurrence may already be on its way).
    paused = tikk_json(stack.address, "schedule", "pause", "beat", "--note", "deploy",
                       "--namespace", ns)  # fmt: skip
    assert paused["paused"] is True and paused["pause_note"] == "deploy"
    eventually(lambda: _settled(stack, ns, "beat"), 20)
    count = len(_runs_of(stack, ns, "beat"))
    time.sleep(3)  # three occurrences pass: none of them runs
    assert len(_runs_of(stack, ns, "beat")) == count
    assert "OCCURRENCE_OUTCOME_SKIPPED_PAUSED" in _outcomes(stack, ns, "beat")
    tikk_json(stack.address, "schedule", "resume", "beat", "--namespace", ns)
    eventually(lambda: len(_runs_of(stack, ns, "beat")) >= count + 2, 20)

    deleted = tikk(stack.address, "schedule", "delete", "beat", "--namespace", ns)
    assert deleted.returncode == 0, deleted.stderr
    eventually(lambda: _settled(stack, ns, "beat"), 20)
    count = len(_runs_of(stack, ns, "beat"))
    time.sleep(2.5)  # occurrences of the deleted schedule pass: none of them runs
    assert len(_runs_of(stack, ns, "beat")) == count
    gone = tikk(stack.address, "schedule", "get", "beat", "--namespace", ns)
    assert gone.returncode == 1 and "NOT_FOUND" in gone.stderr


def test_trigger_backfill_and_preview_of_a_stored_schedule(stack: Stack, ns: str) -> None:
    created = tikk_json(
        stack.address, "schedule", "create", "daily", "--cron", "0 9 * * *", "--tz",
        "Europe/Oslo", "--queue", "e2e", "--handler", "record", "--namespace", ns,
    )  # fmt: skip
    preview = tikk_json(stack.address, "schedule", "preview", "--id", "daily", "--count", "3",
                        "--namespace", ns)  # fmt: skip
    times = [o["local_time"] for o in preview["occurrences"]]
    assert len(times) == 3 and all("09:00:00" in t for t in times)
    assert preview["occurrences"][0]["nominal_time"] == created["next_nominal_time"]

    triggered = tikk_json(stack.address, "schedule", "trigger", "daily", "--namespace", ns)
    tid = triggered["task"]["id"]
    assert tid.startswith("daily@") and triggered["task"]["schedule_id"] == "daily"
    eventually(lambda: any(e["task_id"] == tid for e in stack.executions()))

    # The three 09:00 Oslo occurrences of 1-3 March 2026 (CET, 08:00 UTC), run now.
    day = 86_400_000
    start = 1_772_352_000_000  # 2026-03-01T08:00:00Z
    req = schedules_pb2.BackfillScheduleRequest(
        namespace=ns, schedule_id="daily", start_time=to_timestamp(start),
        end_time=to_timestamp(start + 3 * day),
    )  # fmt: skip
    first = _schedules(stack).BackfillSchedule(req, timeout=10)
    assert (first.created, first.existing) == (3, 0)
    again = _schedules(stack).BackfillSchedule(req, timeout=10)
    assert (again.created, again.existing) == (0, 3)
    backfilled = eventually(lambda: len(r := _runs_of(stack, ns, "daily")) >= 4 and r)
    assert sorted(_nominal(e) for e in backfilled)[:3] == [start, start + day, start + 2 * day]
    outcomes = _outcomes(stack, ns, "daily")
    assert outcomes.count("OCCURRENCE_OUTCOME_TRIGGERED") == 1
    # Backfilled records are in the past: ask for their range.
    req_occ = history_pb2.ListScheduleOccurrencesRequest(
        namespace=ns, schedule_id="daily", start_time=to_timestamp(start),
        end_time=to_timestamp(start + 3 * day),
    )  # fmt: skip
    past = stack.history.ListScheduleOccurrences(req_occ, timeout=10).occurrences
    assert [o.outcome for o in past] == [history_pb2.OCCURRENCE_OUTCOME_BACKFILLED] * 3


def test_schedule_errors_are_clear(stack: Stack, ns: str) -> None:
    bad = tikk(stack.address, "schedule", "create", "x", "--cron", "61 * * * *", "--queue", "e2e",
               "--handler", "record", "--namespace", ns)  # fmt: skip
    assert bad.returncode == 1 and "INVALID_ARGUMENT: spec.cron" in bad.stderr
    never = tikk(stack.address, "schedule", "create", "x", "--cron", "0 0 30 2 *", "--queue",
                 "e2e", "--handler", "record", "--namespace", ns)  # fmt: skip
    assert never.returncode == 1 and "INVALID_ARGUMENT" in never.stderr
    zone = tikk(stack.address, "schedule", "create", "x", "--cron", "0 9 * * *", "--tz",
                "Mars/Olympus", "--queue", "e2e", "--handler", "record",
                "--namespace", ns)  # fmt: skip
    assert zone.returncode == 1 and "INVALID_ARGUMENT: spec.timezone" in zone.stderr
    created = tikk_json(stack.address, "schedule", "create", "v", "--every", "1h", "--queue",
                        "e2e", "--handler", "record", "--namespace", ns)  # fmt: skip
    stale = schedules_pb2.UpdateScheduleRequest(expected_version="7")
    stale.schedule.CopyFrom(schedules_pb2.Schedule(
        namespace=ns, id="v", queue="e2e", handler="record",
        spec=schedules_pb2.ScheduleSpec(cron="*/5 * * * *"),
    ))  # fmt: skip
    with pytest.raises(Exception) as conflict:
        _schedules(stack).UpdateSchedule(stale, timeout=10)
    assert "ABORTED" in str(conflict.value)
    stale.expected_version = created["version"]
    updated = _schedules(stack).UpdateSchedule(stale, timeout=10)
    assert updated.version == "2" and updated.spec.cron == "*/5 * * * *"
    reserved = tikk(stack.address, "task", "create", "--queue", "e2e", "--handler", "record",
                    "--id", "v@123", "--namespace", ns)  # fmt: skip
    assert reserved.returncode == 1 and "INVALID_ARGUMENT: task_id" in reserved.stderr


def _intervals(stack: Stack, ns: str, sid: str) -> list[tuple[int, int]]:
    """(start, end) of each finished run of the schedule's slow handler, by start."""
    events = [e for e in stack.executions() if e["namespace"] == ns
              and e["task_id"].startswith(f"{sid}@")]  # fmt: skip
    starts = {e["task_id"]: e["started_ms"] for e in events if e["event"] == "start"}
    ends = {e["task_id"]: e["started_ms"] for e in events if e["event"] == "end"}
    return sorted((starts[t], ends[t]) for t in ends if t in starts)


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
def test_overlap_policies_keep_slow_runs_apart(stack: Stack, ns: str, overlap: str) -> None:
    tikk_json(
        stack.address, "schedule", "create", "slow", "--every", "1s", "--queue", "e2e",
        "--handler", "slow", "--payload", "2.2", "--overlap", overlap, "--namespace", ns,
    )  # fmt: skip
    runs = eventually(lambda: len(r := _intervals(stack, ns, "slow")) >= 3 and r, 40)
    tikk(stack.address, "schedule", "delete", "slow", "--namespace", ns)
    # Each run starts only after the previous one ended: the handler takes 2.2 s while an
    # occurrence is due every second.
    assert all(start >= prev_end for (_, prev_end), (start, _) in itertools.pairwise(runs))
    outcomes = _outcomes(stack, ns, "slow")
    assert "OCCURRENCE_OUTCOME_SKIPPED_OVERLAP" in outcomes
    if overlap == "buffer_one":
        # The buffered occurrence starts within about a second of the previous end.
        gaps = [start - prev_end for (_, prev_end), (start, _) in itertools.pairwise(runs)]
        assert max(gaps) < 2_500, gaps


def _create(stack: Stack, schedule: schedules_pb2.Schedule) -> schedules_pb2.Schedule:
    req = schedules_pb2.CreateScheduleRequest(schedule=schedule)
    created: schedules_pb2.Schedule = _schedules(stack).CreateSchedule(req, timeout=10)
    return created


def _get(stack: Stack, ns: str, sid: str) -> schedules_pb2.Schedule:
    req = schedules_pb2.GetScheduleRequest(namespace=ns, schedule_id=sid)
    got: schedules_pb2.Schedule = _schedules(stack).GetSchedule(req, timeout=10)
    return got


def test_pause_after_consecutive_failures(stack: Stack, ns: str) -> None:
    _create(stack, schedules_pb2.Schedule(
        namespace=ns, id="failing", queue="e2e", handler="always_fail",
        spec=schedules_pb2.ScheduleSpec(interval=to_duration(1_000)),
        retry_policy=tasks_pb2.RetryPolicy(max_attempts=1),
        policy=schedules_pb2.SchedulePolicy(pause_after_failures=2),
    ))  # fmt: skip
    paused = eventually(lambda: (s := _get(stack, ns, "failing")).paused and s, 30)
    assert paused.consecutive_failures == 2
    assert paused.pause_note.startswith("paused after 2 consecutive failed occurrences")
    eventually(lambda: _settled(stack, ns, "failing"), 20)
    count = len(_runs_of(stack, ns, "failing"))
    time.sleep(2.5)  # occurrences pass while paused: none of them runs
    assert len(_runs_of(stack, ns, "failing")) == count
    resumed = tikk_json(stack.address, "schedule", "resume", "failing", "--namespace", ns)
    assert not resumed.get("paused") and resumed.get("consecutive_failures", 0) == 0
    eventually(lambda: len(_runs_of(stack, ns, "failing")) > count, 20)
    tikk(stack.address, "schedule", "delete", "failing", "--namespace", ns)


def test_update_while_running_changes_the_cadence_without_repeats(stack: Stack, ns: str) -> None:
    spec = schedules_pb2.ScheduleSpec(interval=to_duration(1_000))
    created = _create(stack, schedules_pb2.Schedule(
        namespace=ns, id="moving", queue="e2e", handler="record", spec=spec, payload=b"v1",
    ))  # fmt: skip
    eventually(lambda: len(_runs_of(stack, ns, "moving")) >= 3, 20)
    change = schedules_pb2.Schedule(
        namespace=ns, id="moving", queue="e2e", handler="record", payload=b"v2",
        spec=schedules_pb2.ScheduleSpec(interval=to_duration(3_000)),
    )  # fmt: skip
    req = schedules_pb2.UpdateScheduleRequest(schedule=change, expected_version=created.version)
    updated = _schedules(stack).UpdateSchedule(req, timeout=10)
    changed_at = updated.update_time.ToMilliseconds()
    eventually(
        lambda: sum(_nominal(e) > changed_at for e in _runs_of(stack, ns, "moving")) >= 3, 30
    )
    tikk(stack.address, "schedule", "delete", "moving", "--namespace", ns)
    nominal = sorted(_nominal(e) for e in _runs_of(stack, ns, "moving"))
    assert len(set(nominal)) == len(nominal)
    after = [n for n in nominal if n > changed_at]
    assert all(n % 3_000 == 0 for n in after)  # the new spec's instants only
    assert all(b - a == 3_000 for a, b in itertools.pairwise(after))
