"""Request validation: every refusal names its field; nothing is silently altered."""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from server.api import validation
from tests.factories import T0
from tikk.errors import InvalidArgument
from tikk.model import TaskState
from tikk.settings import Limits
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import schedules_pb2, tasks_pb2

LIMITS = Limits()


def req(**fields: object) -> tasks_pb2.CreateTaskRequest:
    base: dict[str, object] = {"queue": "q", "handler": "h"}
    return tasks_pb2.CreateTaskRequest(**{**base, **fields})  # type: ignore[arg-type]


def refused(request: tasks_pb2.CreateTaskRequest) -> str:
    with pytest.raises(InvalidArgument) as info:
        validation.create_task(request, LIMITS, 256, T0)
    return info.value.field


def test_defaults_and_assigned_id() -> None:
    task = validation.create_task(req(), LIMITS, 256, T0)
    assert task.namespace == "default" and len(task.task_id) == 32
    assert task.state is TaskState.SCHEDULED and task.attempt == 1
    assert task.due_ms == task.scheduled_ms == T0
    assert task.retry == LIMITS.default_retry


def test_delay_and_run_at() -> None:
    assert validation.create_task(req(delay=to_duration(1500)), LIMITS, 256, T0).due_ms == T0 + 1500
    at = T0 + 86_400_000
    assert validation.create_task(req(run_at=to_timestamp(at)), LIMITS, 256, T0).due_ms == at


def test_past_run_at_runs_now_and_keeps_its_scheduled_instant() -> None:
    task = validation.create_task(req(run_at=to_timestamp(T0 - 60_000)), LIMITS, 256, T0)
    assert (task.due_ms, task.scheduled_ms) == (T0, T0 - 60_000)


def test_same_request_later_has_the_same_fingerprint() -> None:
    a = validation.create_task(req(task_id="x", delay=to_duration(5000)), LIMITS, 256, T0)
    b = validation.create_task(req(task_id="x", delay=to_duration(5000)), LIMITS, 256, T0 + 900)
    c = validation.create_task(req(task_id="x", delay=to_duration(6000)), LIMITS, 256, T0)
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_the_trace_context_is_kept_but_not_fingerprinted() -> None:
    traced = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    a = validation.create_task(req(task_id="x"), LIMITS, 256, T0, traced)
    b = validation.create_task(req(task_id="x"), LIMITS, 256, T0)
    assert (a.trace_context, b.trace_context) == (traced, {})
    assert a.fingerprint == b.fingerprint


@pytest.mark.parametrize(
    ("field", "request_fields"),
    [
        ("queue", {"queue": ""}),
        ("queue", {"queue": "-leading-dash"}),
        ("queue", {"queue": "q" * 129}),
        ("handler", {"handler": ""}),
        ("handler", {"handler": "h\x00"}),
        ("payload", {"payload": b"x" * (256 * 1024 + 1)}),
        ("task_id", {"task_id": "x" * 129}),
        ("task_id", {"task_id": " padded"}),
        ("namespace", {"namespace": "a" * 65}),
        ("run_at", {"run_at": to_timestamp(T0 + 11 * 366 * 86_400_000)}),
        ("run_at", {"run_at": Timestamp(seconds=0, nanos=-1)}),
        ("delay", {"delay": Duration(seconds=-1)}),
        ("delay", {"delay": to_duration(11 * 366 * 86_400_000)}),
        ("labels", {"labels": {f"k{i}": "v" for i in range(65)}}),
        ("labels['k']", {"labels": {"k": "x" * 257}}),
        ("retry_policy.max_attempts", {"retry_policy": tasks_pb2.RetryPolicy(max_attempts=1001)}),
        ("retry_policy.multiplier", {"retry_policy": tasks_pb2.RetryPolicy(multiplier=101)}),
        ("retry_policy.jitter", {"retry_policy": tasks_pb2.RetryPolicy(jitter=-0.1)}),
        (
            "retry_policy.max_backoff",
            {"retry_policy": tasks_pb2.RetryPolicy(max_backoff=to_duration(400 * 86_400_000))},
        ),
        (
            "retry_policy.initial_backoff",
            {"retry_policy": tasks_pb2.RetryPolicy(initial_backoff=Duration(seconds=-1))},
        ),
    ],
)
def test_refusals_name_the_field(field: str, request_fields: dict[str, object]) -> None:
    assert refused(req(**request_fields)) == field


def test_payload_at_the_limit_is_accepted_unchanged() -> None:
    payload = bytes(range(256)) * 1024
    assert validation.create_task(req(payload=payload), LIMITS, 256, T0).payload == payload


def test_partial_retry_policy_takes_defaults_for_the_rest() -> None:
    policy = tasks_pb2.RetryPolicy(max_attempts=7, jitter=0.0)
    task = validation.create_task(req(retry_policy=policy), LIMITS, 256, T0)
    assert (task.retry.max_attempts, task.retry.jitter) == (7, 0.0)
    assert task.retry.initial_backoff_ms == LIMITS.default_retry.initial_backoff_ms


def test_configurable_payload_cap() -> None:
    small = Limits(max_payload_bytes=10)
    with pytest.raises(InvalidArgument, match="payload: larger than 10 bytes"):
        validation.create_task(req(payload=b"x" * 11), small, 256, T0)


# Queue names: no two may map to colliding Kafka topics (Kafka takes "." and "_" as one).


@pytest.mark.parametrize(
    "name", ["a.b", "x.dlq", "x_dlq", "-dash", "_under", "a b", "ä", "q/1", "q" * 129, ""]
)
def test_queue_names_that_could_collide_on_kafka_are_refused(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validation.create_task(req(queue=name), LIMITS, 256, T0)
    assert info.value.field == "queue"
    assert str(info.value).startswith("queue: ")


def test_the_refusal_states_the_rule_and_why() -> None:
    with pytest.raises(InvalidArgument) as info:
        validation.create_task(req(queue="a.b"), LIMITS, 256, T0)
    assert "A-Z a-z 0-9 _ -" in info.value.reason and "collide" in info.value.reason
    with pytest.raises(InvalidArgument, match=r"_dlq.*dead-letter"):
        validation.create_task(req(queue="x_dlq"), LIMITS, 256, T0)


@pytest.mark.parametrize("name", ["a_b", "a-b", "A9", "dlq", "x_dlqs", "x-dlq", "q" * 128])
def test_queue_names_without_a_dot_are_accepted_unchanged(name: str) -> None:
    assert validation.create_task(req(queue=name), LIMITS, 256, T0).queue == name


def test_a_schedule_queue_follows_the_same_rule() -> None:
    with pytest.raises(InvalidArgument) as info:
        validation.schedule_action(schedules_pb2.Schedule(queue="a.b", handler="h"), LIMITS)
    assert info.value.field == "schedule.queue"
    action = validation.schedule_action(schedules_pb2.Schedule(queue="a_b", handler="h"), LIMITS)
    assert action.queue == "a_b"


def test_list_filters_still_accept_names_older_versions_stored() -> None:
    assert validation.queue("a.b", LIMITS) == "a.b"
    with pytest.raises(InvalidArgument):
        validation.queue("a b", LIMITS)
