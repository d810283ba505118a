"""Failover options of a worker: defaults, validation, and the ``tikk worker`` flags."""

from __future__ import annotations

import re

import pytest

from server.cli import main
from worker_sdk import Worker
from worker_sdk.queues.consumer import GroupTiming


def test_defaults_move_a_dead_workers_partitions_within_the_brokers_minimum_session() -> None:
    worker = Worker(queues=["q"])
    assert worker.group_timing == GroupTiming(session_timeout_ms=6_000, heartbeat_interval_ms=1_000)
    assert worker.report_timeout_s == 15.0


def test_a_heartbeat_of_a_third_of_the_session_or_more_is_refused() -> None:
    with pytest.raises(
        ValueError, match=r"heartbeat interval \(2000 ms\) must be less than a third"
    ):
        Worker(queues=["q"], heartbeat_interval_s=2.0)
    assert GroupTiming(6_000, 1_999).heartbeat_interval_ms == 1_999
    with pytest.raises(ValueError, match="positive"):
        GroupTiming(6_000, 0)


def test_set_failover_changes_what_is_given_and_nothing_on_a_bad_value() -> None:
    worker = Worker(queues=["q"])
    worker.set_failover(session_timeout_s=10.0, report_timeout_s=30.0)
    assert worker.group_timing == GroupTiming(10_000, 1_000)
    assert worker.report_timeout_s == 30.0
    with pytest.raises(ValueError, match="report timeout must be positive"):
        worker.set_failover(heartbeat_interval_s=2.0, report_timeout_s=0.0)
    with pytest.raises(ValueError, match="less than a third"):
        worker.set_failover(session_timeout_s=3.0)
    assert (worker.group_timing, worker.report_timeout_s) == (GroupTiming(10_000, 1_000), 30.0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--heartbeat-interval", "2s"], "must be less than a third of the session timeout"),
        (["--session-timeout", "2s"], "must be less than a third of the session timeout"),
        (["--report-timeout", "0s"], "report timeout must be positive"),
    ],
)
def test_the_worker_command_refuses_bad_timing_before_it_starts(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["worker", "tests.e2e.worker_app:worker", "--server", "127.0.0.1:1", *flags])
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name", ["a.b", "x_dlq", "-dash", "q" * 129, ""])
def test_a_worker_refuses_queue_names_no_task_can_have(name: str) -> None:
    with pytest.raises(ValueError, match="queue"):
        Worker(queues=[name])


@pytest.mark.parametrize(
    ("worker_id", "said"),
    [("w\x1b]0;pwned\x07", "U+001B"), ("w\u202e1", "U+202E"), ("w" * 129, "at most 128")],
)
def test_a_worker_id_the_server_would_refuse_is_refused_when_the_worker_is_built(
    worker_id: str, said: str
) -> None:
    """Every result of such a worker would be refused, and reported again for ever."""
    with pytest.raises(ValueError, match=re.escape(said)):
        Worker(queues=["q"], worker_id=worker_id)
    assert Worker(queues=["q"], worker_id="host-7.pid:12/é").worker_id == "host-7.pid:12/é"


def test_an_instance_id_makes_a_static_member_and_outlives_other_failover_changes() -> None:
    worker = Worker(queues=["q"], instance_id="billing-3")
    assert worker.group_timing == GroupTiming(6_000, 1_000, instance_id="billing-3")
    worker.set_failover(session_timeout_s=10.0)
    assert worker.group_timing == GroupTiming(10_000, 1_000, instance_id="billing-3")
    assert Worker(queues=["q"]).group_timing.instance_id is None  # dynamic by default


@pytest.mark.parametrize("instance_id", ["a b", "host/1", "é", "x" * 250])
def test_an_instance_id_kafka_would_refuse_is_refused_when_the_worker_is_built(
    instance_id: str,
) -> None:
    with pytest.raises(ValueError, match="instance id"):
        Worker(queues=["q"], instance_id=instance_id)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--instance-id", "not ok", "instance id 'not ok'"),
        ("--result-backlog", "1", "must be at least the concurrency"),
    ],
)
def test_the_worker_command_refuses_a_bad_flag_before_it_starts(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    code = main(["worker", "tests.e2e.worker_app:worker", "--server", "127.0.0.1:1", flag, value])
    assert code == 2
    assert message in capsys.readouterr().err


def test_the_result_backlog_flag_lands_on_the_worker_and_a_bad_flag_changes_nothing() -> None:
    from server.cli import build_parser
    from server.cli.workers import _apply_worker_flags, load_worker

    worker = load_worker("tests.e2e.worker_app:worker")
    before = worker.result_backlog
    args = build_parser().parse_args(
        ["worker", "tests.e2e.worker_app:worker", "--server", "127.0.0.1:1",
         "--result-backlog", str(4 * worker.concurrency)]
    )  # fmt: skip
    bad = build_parser().parse_args(
        ["worker", "tests.e2e.worker_app:worker", "--server", "127.0.0.1:1",
         "--result-backlog", str(4 * worker.concurrency), "--report-timeout", "0s"]
    )  # fmt: skip
    try:
        with pytest.raises(ValueError, match="report timeout"):
            _apply_worker_flags(worker, bad)
        assert worker.result_backlog == before
        _apply_worker_flags(worker, args)
        assert worker.result_backlog == 4 * worker.concurrency
    finally:
        worker.result_backlog = before  # the module's worker is shared with other tests
