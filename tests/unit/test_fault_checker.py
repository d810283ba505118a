"""The fault suite's checker on hand-made histories: each violation is found, and nothing
that at-least-once allows is reported as one."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

from devtools.faults import checker, modes
from devtools.faults.checker import Percentiles, check
from devtools.faults.cluster import last_line
from devtools.faults.nemesis import FaultSpec, plan_faults
from devtools.faults.records import (
    BulkCancelRecord,
    Call,
    CancelRecord,
    Crash,
    CreateRecord,
    FaultKind,
    FaultWindow,
    FinalState,
    History,
    Start,
    TaskKind,
    parse_start,
    read_history,
    write_history,
)
from devtools.faults.report import RunInfo, recovery_line, render
from devtools.faults.workload import WorkloadSpec, batches, plan_tasks

T0 = 1_800_000_000_000
DUE = T0 + 10_000


def create(
    tid: str, kind: TaskKind = TaskKind.OK, due: int = DUE, *codes: str, attempts: int = 3
) -> CreateRecord:
    calls = tuple(Call(T0 + i, T0 + i + 5, c) for i, c in enumerate(codes or ("OK",)))
    return CreateRecord(tid, kind, due, False, attempts, calls)


def cancel(tid: str, *codes: str) -> CancelRecord:
    return CancelRecord(tid, tuple(Call(DUE - 5_000, DUE - 4_990, c) for c in codes))


def start(
    tid: str, at: int, attempt: int = 1, due: int = DUE, key: str = "", worker: str = "h-1"
) -> Start:
    return Start(tid, attempt, key or f"faults/{tid}", due, due, at, worker)


def history(
    creates: tuple[CreateRecord, ...] = (),
    starts: tuple[Start, ...] = (),
    cancels: tuple[CancelRecord, ...] = (),
    faults: tuple[FaultWindow, ...] = (),
    finals: tuple[FinalState, ...] = (),
    dead: frozenset[str] = frozenset(),
) -> History:
    return History(creates, cancels, starts, faults, finals, dead)


def kill(kind: FaultKind, begin: int, end: int, pid: int = 0) -> FaultWindow:
    return FaultWindow(kind, "x", begin, end, pid)


# --- lost -------------------------------------------------------------------------------


def test_an_accepted_task_that_never_started_is_lost() -> None:
    h = history(creates=(create("a"), create("b")), starts=(start("a", DUE + 50),))
    assert checker.lost(h) == ("b",)
    assert check(h).failures == ["lost: 1"]


def test_lost_tasks_are_told_by_final_state_and_the_fault_near_their_due_time() -> None:
    stop = kill(FaultKind.STOP_CASSANDRA, DUE - 2_000, DUE + 8_000)
    h = history(
        creates=(create("a"), create("b", TaskKind.OK, DUE + 500_000)),
        faults=(stop,),
        finals=(FinalState("a", "SCHEDULED", 1), FinalState("b", "DISPATCHED", 1)),
    )
    r = check(h)
    assert r.lost_states == (("DISPATCHED", 1), ("SCHEDULED", 1))
    assert r.lost_near == (("none", 1), ("stop cassandra", 1))


def test_a_lost_task_goes_to_the_fault_that_held_its_due_time_not_the_next_one() -> None:
    faults = (
        kill(FaultKind.STOP_CASSANDRA, DUE - 5_000, DUE + 5_000),
        kill(FaultKind.KILL_DISPATCHER, DUE + 5_000, DUE + 9_000),
    )
    assert checker.near_fault(DUE, faults) == "stop cassandra"
    assert checker.near_fault(DUE + 7_000, faults) == "kill dispatcher"
    assert checker.near_fault(DUE + 20_000, faults) == "kill dispatcher"


def test_a_create_that_never_returned_ok_is_not_accepted_so_not_lost() -> None:
    h = history(creates=(create("a", TaskKind.OK, DUE, "UNAVAILABLE", "DEADLINE_EXCEEDED"),))
    assert checker.lost(h) == ()
    r = check(h)
    assert (r.accepted, r.indeterminate, r.failed) == (0, 1, False)


def test_an_accepted_create_after_indeterminate_attempts_counts_and_can_be_lost() -> None:
    h = history(creates=(create("a", TaskKind.OK, DUE, "UNAVAILABLE", "OK"),))
    r = check(h)
    assert (r.accepted, r.accepted_after_retry, r.lost) == (1, 1, ("a",))


def test_cancelled_tasks_are_not_lost_when_the_cancel_took_effect() -> None:
    creates = tuple(create(t, TaskKind.CANCEL) for t in ("ok", "unknown-applied", "unknown"))
    cancels = (
        cancel("ok", "OK"),
        cancel("unknown-applied", "UNAVAILABLE"),
        cancel("unknown", "DEADLINE_EXCEEDED"),
    )
    finals = (
        FinalState("unknown-applied", "CANCELLED", 1),
        FinalState("unknown", "SCHEDULED", 1),
    )
    h = history(creates=creates, cancels=cancels, finals=finals)
    assert checker.lost(h) == ("unknown",)


def test_a_refused_cancel_leaves_the_task_expected_to_run() -> None:
    h = history(
        creates=(create("a", TaskKind.CANCEL),), cancels=(cancel("a", "FAILED_PRECONDITION"),)
    )
    assert checker.lost(h) == ("a",)
    assert check(h).cancels_refused == 1


def test_a_bulk_cancel_is_judged_by_what_its_batch_ended_as() -> None:
    ids = ("gone", "gone-ran", "unsettled-ran", "escaped-ran", "escaped-never")
    bulk = BulkCancelRecord("b0", ids, (Call(T0, T0 + 5, "OK"),))
    finals = (
        FinalState("gone", "CANCELLED", 1, DUE - 9_000),
        FinalState("gone-ran", "CANCELLED", 1, DUE - 9_000),  # settled, and ran: a violation
        FinalState("unsettled-ran", "CANCELLED", 1, DUE - 500),  # acknowledged as unsettled
        FinalState("escaped-ran", "SUCCEEDED", 1, DUE + 100),
        FinalState("escaped-never", "SCHEDULED", 1, T0),
    )
    h = History(
        tuple(create(t, TaskKind.BULK_CANCEL) for t in ids), (),
        tuple(start(t, DUE + 50) for t in ("gone-ran", "unsettled-ran", "escaped-ran")),
        (), finals, frozenset(), (bulk,),
    )  # fmt: skip
    assert checker.lost(h) == ("escaped-never",)
    assert checker.cancelled_but_ran(h) == ("gone-ran",)
    r = check(h)
    assert (r.bulk_cancelled, r.bulk_batched) == (3, 5)
    assert r.failures == ["lost: 1", "cancelled but ran: 1"]


def test_bulk_cancel_records_survive_the_records_file(tmp_path: Path) -> None:
    bulk = BulkCancelRecord("b3", ("x", "y"), (Call(T0, T0 + 5, "UNAVAILABLE"),))
    h = History((), (), (), (), (FinalState("x", "CANCELLED", 1, T0),), frozenset(), (bulk,))
    write_history(h, tmp_path / "records.jsonl")
    (tmp_path / "starts.jsonl").write_text("")
    again = read_history(tmp_path / "records.jsonl", tmp_path / "starts.jsonl")
    assert again.bulk_cancels == (bulk,) and again.finals == h.finals


# --- early ------------------------------------------------------------------------------


def test_a_start_before_the_delivered_due_time_is_early() -> None:
    h = history(creates=(create("a"),), starts=(start("a", DUE - 1),))
    [e] = checker.early(h)
    assert (e.start.task_id, e.by_ms) == ("a", 1)


def test_a_start_at_the_due_millisecond_is_not_early() -> None:
    h = history(creates=(create("a"),), starts=(start("a", DUE),))
    assert checker.early(h) == ()


def test_a_first_attempt_before_the_requested_run_at_is_early_whatever_the_delivery_says() -> None:
    # The delivery claims an earlier due time than the client asked for.
    h = history(creates=(create("a"),), starts=(start("a", DUE - 500, due=DUE - 1_000),))
    [e] = checker.early(h)
    assert e.due_ms == DUE


def test_retries_are_checked_against_their_own_due_time() -> None:
    retry_due = DUE + 3_000
    starts = (start("a", DUE + 10), start("a", retry_due - 1, attempt=2, due=retry_due))
    h = history(creates=(create("a", TaskKind.FAIL_ONCE),), starts=starts)
    assert [e.start.attempt for e in checker.early(h)] == [2]


def test_a_task_that_was_never_accepted_must_not_run_early_either() -> None:
    h = history(creates=(create("a", TaskKind.OK, DUE, "UNAVAILABLE"),), starts=(start("a", T0),))
    assert len(checker.early(h)) == 1


# --- duplicates -------------------------------------------------------------------------


def test_second_start_of_one_attempt_is_a_duplicate_attributed_to_the_fault() -> None:
    worker_kill = kill(FaultKind.KILL_WORKER, DUE + 100, DUE + 2_000)
    starts = (start("a", DUE + 50), start("a", DUE + 12_000), start("b", DUE + 60))
    d = checker.duplicates(starts, (worker_kill,))
    assert (d.total, d.runs_affected, d.by_fault) == (1, 1, (("kill worker", 1),))
    assert not check(history(creates=(create("a"), create("b")), starts=starts)).failed


def test_a_retry_is_not_a_duplicate() -> None:
    starts = (start("a", DUE + 10), start("a", DUE + 2_000, attempt=2, due=DUE + 1_500))
    assert checker.duplicates(starts, ()).total == 0


def test_a_duplicate_far_from_every_fault_is_unattributed() -> None:
    far = kill(FaultKind.KILL_SERVER, DUE + 200_000, DUE + 201_000)
    starts = (start("a", DUE + 10), start("a", DUE + 20))
    assert checker.duplicates(starts, (far,)).by_fault == (("none", 1),)


def test_a_duplicate_goes_to_the_latest_fault_that_can_explain_it() -> None:
    faults = (
        kill(FaultKind.KILL_DISPATCHER, DUE - 1_000, DUE),
        kill(FaultKind.PAUSE_DISPATCHER, DUE + 1_000, DUE + 10_000),
    )
    starts = (start("a", DUE + 5), start("a", DUE + 10_500))
    assert checker.duplicates(starts, faults).by_fault == (("pause dispatcher", 1),)


# --- cancels and keys -------------------------------------------------------------------


def test_a_task_whose_cancel_returned_ok_must_not_start() -> None:
    h = history(
        creates=(create("a", TaskKind.CANCEL), create("b", TaskKind.CANCEL)),
        cancels=(cancel("a", "OK"), cancel("b", "FAILED_PRECONDITION")),
        starts=(start("a", DUE + 5), start("b", DUE + 5)),
    )
    assert checker.cancelled_but_ran(h) == ("a",)
    assert check(h).failures == ["cancelled but ran: 1"]


def test_every_start_of_a_task_must_carry_the_same_key() -> None:
    starts = (
        start("a", DUE + 1, key="k1"),
        start("a", DUE + 9, key="k1"),
        start("b", DUE + 1, key="k2"),
        start("b", DUE + 2_000, attempt=2, key="k3"),
    )
    assert checker.key_inconsistent(starts) == ("b",)


# --- retries and dead letters -----------------------------------------------------------


def _always_fail_starts(tid: str, attempts: list[int]) -> tuple[Start, ...]:
    return tuple(start(tid, DUE + a * 1_000, attempt=a, due=DUE + a * 900) for a in attempts)


def test_an_always_failing_task_dead_lettered_after_exactly_its_attempts_is_exact() -> None:
    h = history(
        creates=(create("a", TaskKind.ALWAYS_FAIL),),
        starts=_always_fail_starts("a", [1, 2, 3]),
        finals=(FinalState("a", "DEAD_LETTERED", 3),),
        dead=frozenset({"a"}),
    )
    assert checker.dead_letter_inexact(h) == ()


def test_dead_letter_inexactness_is_found() -> None:
    cases = {
        "skipped-attempt": ([1, 3], FinalState("skipped-attempt", "DEAD_LETTERED", 3), True),
        "not-listed": ([1, 2, 3], FinalState("not-listed", "DEAD_LETTERED", 3), False),
        "still-running": ([1, 2, 3], FinalState("still-running", "DISPATCHED", 3), True),
        "too-many": ([1, 2, 3, 4], FinalState("too-many", "DEAD_LETTERED", 4), True),
    }
    h = history(
        creates=tuple(create(t, TaskKind.ALWAYS_FAIL) for t in cases),
        starts=tuple(s for t, (a, _, _) in cases.items() for s in _always_fail_starts(t, a)),
        finals=tuple(f for _, f, _ in cases.values()),
        dead=frozenset(t for t, (_, _, listed) in cases.items() if listed),
    )
    assert sorted(i.task_id for i in checker.dead_letter_inexact(h)) == sorted(cases)


def test_a_fail_once_task_must_succeed_at_attempt_two() -> None:
    good, bad = "good", "bad"
    h = history(
        creates=(create(good, TaskKind.FAIL_ONCE), create(bad, TaskKind.FAIL_ONCE)),
        starts=(*_always_fail_starts(good, [1, 2]), *_always_fail_starts(bad, [1, 2, 3])),
        finals=(FinalState(good, "SUCCEEDED", 2), FinalState(bad, "SUCCEEDED", 3)),
    )
    [inexact] = checker.dead_letter_inexact(h)
    assert inexact.task_id == bad
    assert "attempts started [1, 2, 3]" in inexact.found


def test_a_plain_task_in_the_dead_letters_is_reported_but_not_a_violation() -> None:
    h = history(
        creates=(create("a"),),
        starts=(start("a", DUE + 1),),
        finals=(FinalState("a", "DEAD_LETTERED", 1),),
        dead=frozenset({"a"}),
    )
    r = check(h)
    assert r.unexpected_dead_letters == ("a",)
    assert [f.task_id for f in r.unfinished] == ["a"]
    assert not r.failed


# --- lateness and recovery --------------------------------------------------------------


def test_lateness_is_split_by_whether_the_due_time_fell_in_a_fault_window() -> None:
    window = kill(FaultKind.KILL_SERVER, DUE, DUE + 2_000)
    starts = (
        start("in", DUE + 1_500, due=DUE + 1_000),  # inside: 500 ms
        start("after", DUE + 9_000, due=DUE + 6_000),  # within 5 s after: 3,000 ms
        start("out", DUE + 30_100, due=DUE + 30_000),  # outside: 100 ms
        start("out", DUE + 40_000, due=DUE + 30_000),  # a duplicate: only the first counts
    )
    inside = checker.lateness(starts, (window,), 5_000, inside=True)
    outside = checker.lateness(starts, (window,), 5_000, inside=False)
    assert (inside.count, inside.max) == (2, 3_000)
    assert (outside.count, outside.p50, outside.max) == (1, 100, 100)


def test_percentiles_use_the_nearest_rank() -> None:
    p = Percentiles.of(range(1, 101))
    assert (p.count, p.p50, p.p99, p.max) == (100, 51, 100, 100)
    assert Percentiles.of([]) == Percentiles(0, None, None, None)


def test_recovery_after_a_worker_kill_counts_redelivered_in_flight_runs() -> None:
    victim = kill(FaultKind.KILL_WORKER, DUE + 1_000, DUE + 4_000, pid=4242)
    starts = (
        start("a", DUE + 900, worker="host-4242"),  # in flight on the killed worker
        start("a", DUE + 13_000, worker="host-7"),  # run again 12 s after the kill
        start("b", DUE + 1_200, worker="host-7"),  # the other worker carried on
        start("c", DUE + 6_000, due=DUE + 3_000, worker="host-7"),
    )
    [r] = checker.recovery(starts, (victim,), 5_000)
    assert (r.kind, r.count, r.max_resume_ms) == (FaultKind.KILL_WORKER, 1, 200)
    assert (r.redelivered, r.max_redelivery_ms, r.max_delay_ms) == (1, 12_000, 3_000)


def test_a_fault_soon_after_another_is_not_charged_with_its_backlog_when_isolated() -> None:
    outage = kill(FaultKind.STOP_CASSANDRA, DUE, DUE + 30_000)
    crowded = kill(FaultKind.KILL_SERVER, DUE + 31_000, DUE + 34_000)
    alone = kill(FaultKind.KILL_SERVER, DUE + 200_000, DUE + 203_000)
    starts = (
        start("backlog", DUE + 60_000, due=DUE + 32_000),  # still the outage's backlog
        start("quick", DUE + 202_500, due=DUE + 201_000),
    )
    by_kind = {r.kind: r for r in checker.recovery(starts, (outage, crowded, alone), 5_000)}
    r = by_kind[FaultKind.KILL_SERVER]
    assert (r.count, r.max_delay_ms) == (2, 28_000)
    assert (r.isolated, r.max_isolated_delay_ms) == (1, 1_500)
    assert "1,500 ms over the 1 isolated" in recovery_line(r)
    stop = by_kind[FaultKind.STOP_CASSANDRA]
    assert stop.max_catch_up_ms == 30_000  # the backlog's last start, after the store's return
    assert "caught up 30,000 ms after it ended" in recovery_line(stop)


# --- records, report, plans -------------------------------------------------------------


def test_a_process_that_crashed_on_its_own_fails_the_run_and_is_named() -> None:
    crash = Crash("worker-1", 1, DUE + 2_000, "logs/worker-1.1.log", "tikk worker: refused")
    h = replace(history(creates=(create("a"),), starts=(start("a", DUE + 5),)), crashes=(crash,))
    r = check(h)
    assert r.failures == ["crashed on its own: 1"]
    text = render(r, RunInfo("ci", 1, 200.0, "records", 1, 20.0, incomplete=None))
    assert "worker-1 exited with code 1" in text and "FAILED: crashed on its own: 1" in text
    assert "its last line: tikk worker: refused" in text
    assert check(history(creates=(create("a"),), starts=(start("a", DUE + 5),))).failures == []


def test_a_crashed_process_is_remembered_by_its_logs_last_line(tmp_path: Path) -> None:
    log = tmp_path / "dispatcher-0.2.log"
    log.write_text("tikk dispatcher running\n" + "WARNING noise\n" * 1_000 + "tikk x: why\n\n")
    assert last_line(log) == "tikk x: why"
    assert last_line(log, limit=6) == "tikk x"
    assert last_line(tmp_path / "absent.log") == ""


def test_a_start_line_cut_short_by_a_kill_is_skipped() -> None:
    line = start("a", DUE).to_json()
    assert parse_start(line) == start("a", DUE)
    assert parse_start(line[: len(line) // 2]) is None


def test_a_history_written_and_read_back_is_the_same(tmp_path: Path) -> None:
    h = history(
        creates=(create("a", TaskKind.FAIL_ONCE, DUE, "UNAVAILABLE", "OK"),),
        starts=(start("a", DUE + 3), start("a", DUE + 900, attempt=2)),
        cancels=(cancel("b", "DEADLINE_EXCEEDED", "OK"),),
        faults=(kill(FaultKind.STOP_KAFKA, DUE, DUE + 5_000, pid=77),),
        finals=(FinalState("a", "SUCCEEDED", 2),),
        dead=frozenset({"c"}),
    )
    crash = Crash("dispatcher-0", -11, DUE + 7, "logs/dispatcher-0.2.log", "Segmentation fault")
    h = replace(h, crashes=(crash,))
    write_history(h, tmp_path / "records.jsonl")
    (tmp_path / "starts.jsonl").write_text("".join(s.to_json() + "\n" for s in h.starts))
    assert read_history(tmp_path / "records.jsonl", tmp_path / "starts.jsonl") == h


def test_the_report_names_every_violation() -> None:
    h = history(
        creates=(create("lost"), create("early"), create("c", TaskKind.CANCEL)),
        cancels=(cancel("c", "OK"),),
        starts=(start("early", DUE - 10), start("c", DUE + 1)),
    )
    r = check(h)
    info = RunInfo("ci", 1, 200.0, "records", 3, 20.0, incomplete=None)
    text = render(r, info)
    assert "FAILED: lost: 1; early: 1; cancelled but ran: 1" in text
    assert "early attempt 1 started 10 ms before due" in text


def test_the_workload_plan_has_the_asked_for_mix_and_timing() -> None:
    spec = WorkloadSpec(rate_per_s=100.0, duration_s=100.0)
    plans = plan_tasks(spec, random.Random(7), T0)
    kinds = Counter(p.kind for p in plans)
    assert len(plans) == 10_000
    assert 120 <= kinds[TaskKind.CANCEL] <= 280 and 50 <= kinds[TaskKind.ALWAYS_FAIL] <= 150
    assert 400 <= kinds[TaskKind.FAIL_ONCE] <= 600
    assert all(p.due_ms == p.create_at_ms for p in plans if p.due_now)
    assert 100 <= sum(p.due_now for p in plans) <= 300
    for p in plans:
        if p.cancel_at_ms is not None:
            assert p.create_at_ms < p.cancel_at_ms <= p.due_ms - 4_000
    assert plan_tasks(spec, random.Random(7), T0) == plans
    # Bulk cancels: batches of four, each sent 0.5 s after its last create and 12 s or more
    # before its first due time, labelled so one selector takes the batch.
    groups = batches(plans)
    assert 200 <= sum(len(b) for b in groups.values()) <= 400
    assert all(len(b) == 4 for b in list(groups.values())[:-1])
    for label, batch in groups.items():
        cancel_at = max(p.create_at_ms for p in batch) + 500
        assert cancel_at <= min(p.due_ms for p in batch) - 12_000
        assert {p.kind for p in batch} == {TaskKind.BULK_CANCEL}
        assert all(p.batch == label for p in batch)


def test_the_fault_plan_has_every_fault_once_in_its_span() -> None:
    spec = FaultSpec(3, 3, 3, 1, 1, 1, first_at_s=8.0, last_at_s=100.0, queue_pauses=1)
    roles = {"server": ["server"], "dispatcher": ["d-0", "d-1"], "worker": ["w-0", "w-1"]}
    plan = plan_faults(spec, random.Random(3), roles)
    assert Counter(f.kind for f in plan) == {
        FaultKind.KILL_SERVER: 3, FaultKind.KILL_DISPATCHER: 3, FaultKind.KILL_WORKER: 3,
        FaultKind.PAUSE_DISPATCHER: 1, FaultKind.STOP_KAFKA: 1, FaultKind.STOP_CASSANDRA: 1,
        FaultKind.PAUSE_QUEUE: 1,
    }  # fmt: skip
    assert all(8.0 <= f.at_s < 100.0 for f in plan)
    assert all(1.0 <= f.hold_s <= 4.0 for f in plan if f.kind.is_kill)
    assert {f.target for f in plan if f.kind is FaultKind.PAUSE_DISPATCHER} <= {"d-0", "d-1"}
    assert {f.target for f in plan if f.kind is FaultKind.PAUSE_QUEUE} == {"faults"}


def test_the_modes_fault_as_often_as_promised() -> None:
    ci = modes.ci().faults
    assert min(ci.server_kills, ci.dispatcher_kills, ci.worker_kills) >= 3
    assert ci.dispatcher_pauses >= 1 and ci.pause_s > 4  # longer than the ZooKeeper session
    hour = modes.soak(3600).faults
    assert min(hour.server_kills, hour.dispatcher_kills, hour.worker_kills) >= 20
    assert hour.kafka_stops >= 2 and hour.cassandra_stops >= 2 and hour.kafka_stop_s == 30
    assert modes.ci().without_service_faults().faults.service_faults is False
