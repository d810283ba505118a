"""The whole task lifecycle through a real gRPC server and a real worker process."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.duration_pb2 import Duration
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.e2e.conftest import EARLIEST_MS, Stack
from tests.waiting import eventually
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, tasks_pb2

pytestmark = pytest.mark.e2e


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def fast_retry(max_attempts: int) -> tasks_pb2.RetryPolicy:
    return tasks_pb2.RetryPolicy(
        max_attempts=max_attempts, initial_backoff=to_duration(200), multiplier=1.5, jitter=0.0
    )


def create(stack: Stack, ns: str, task_id: str, handler: str = "record", **kw: object) -> None:
    req = tasks_pb2.CreateTaskRequest(
        namespace=ns,
        task_id=task_id,
        queue="e2e",
        handler=handler,
        **kw,  # type: ignore[arg-type]
    )
    stack.tasks.CreateTask(req, timeout=10)


def state_of(stack: Stack, ns: str, task_id: str) -> int:
    return stack.task(ns, task_id).state


def test_tasks_fire_at_or_after_due_and_within_one_second(stack: Stack, ns: str) -> None:
    start = now_ms()
    dues = {f"on-time-{i}": start + 1_500 + i * 137 for i in range(30)}
    for task_id, due in dues.items():
        create(stack, ns, task_id, run_at=to_timestamp(due))
    eventually(
        lambda: all(state_of(stack, ns, t) == tasks_pb2.TASK_STATE_SUCCEEDED for t in dues),
        timeout=30,
    )
    runs = {e["task_id"]: e for e in stack.executions() if e["namespace"] == ns}
    assert set(runs) == set(dues)
    for task_id, due in dues.items():
        lateness = runs[task_id]["started_ms"] - due
        assert 0 <= lateness < 1_000, (task_id, lateness)
        (run,) = stack.runs(ns, task_id)
        # Handed over up to the lead (and its batch's window) early; started at due.
        assert run.fired_time.ToMilliseconds() >= due - EARLIEST_MS
        assert run.start_time.ToMilliseconds() >= due


def test_retry_then_success_keeps_the_idempotency_key(stack: Stack, ns: str) -> None:
    create(stack, ns, "flaky", handler="flaky", payload=b"3", retry_policy=fast_retry(5))
    eventually(lambda: state_of(stack, ns, "flaky") == tasks_pb2.TASK_STATE_SUCCEEDED)
    runs = stack.runs(ns, "flaky")
    assert [(r.attempt, r.status) for r in runs] == [
        (1, history_pb2.RUN_STATUS_FAILED),
        (2, history_pb2.RUN_STATUS_FAILED),
        (3, history_pb2.RUN_STATUS_SUCCEEDED),
    ]
    assert runs[0].error_type == "ConnectionError"
    assert len({r.idempotency_key for r in runs}) == 1
    # Each retry waited at least its backoff (200 ms, then 300 ms), never less.
    assert runs[1].start_time.ToMilliseconds() - runs[0].finish_time.ToMilliseconds() >= 200
    assert runs[2].start_time.ToMilliseconds() - runs[1].finish_time.ToMilliseconds() >= 300


def test_dead_letter_after_max_attempts_then_redrive(stack: Stack, ns: str) -> None:
    create(stack, ns, "doomed", handler="always_fail", retry_policy=fast_retry(3))
    eventually(lambda: state_of(stack, ns, "doomed") == tasks_pb2.TASK_STATE_DEAD_LETTERED)
    runs = stack.runs(ns, "doomed")
    assert [r.status for r in runs] == [
        history_pb2.RUN_STATUS_FAILED,
        history_pb2.RUN_STATUS_FAILED,
        history_pb2.RUN_STATUS_DEAD_LETTERED,
    ]
    task = stack.task(ns, "doomed")
    assert (task.last_error_type, task.last_error_message) == ("ValueError", "never works")
    dead = stack.history.ListDeadLetters(history_pb2.ListDeadLettersRequest(namespace=ns))
    assert [t.id for t in dead.tasks] == ["doomed"]
    stack.history.RedriveTask(history_pb2.RedriveTaskRequest(namespace=ns, task_id="doomed"))
    eventually(lambda: len(stack.runs(ns, "doomed")) == 6)
    assert state_of(stack, ns, "doomed") == tasks_pb2.TASK_STATE_DEAD_LETTERED


def test_unknown_handler_is_dead_lettered_once(stack: Stack, ns: str) -> None:
    create(stack, ns, "lost", handler="no_such_handler", retry_policy=fast_retry(5))
    eventually(lambda: state_of(stack, ns, "lost") == tasks_pb2.TASK_STATE_DEAD_LETTERED)
    (run,) = stack.runs(ns, "lost")
    assert run.error_type == "UnknownHandler"
    assert "no_such_handler" in run.error_message and "record" in run.error_message


def test_explicit_retry_after_and_non_retryable(stack: Stack, ns: str) -> None:
    create(stack, ns, "later", handler="retry_later", retry_policy=fast_retry(3))
    create(stack, ns, "rejected", handler="reject", retry_policy=fast_retry(5))
    eventually(lambda: state_of(stack, ns, "later") == tasks_pb2.TASK_STATE_SUCCEEDED)
    first, second = stack.runs(ns, "later")
    assert second.start_time.ToMilliseconds() - first.finish_time.ToMilliseconds() >= 500
    eventually(lambda: state_of(stack, ns, "rejected") == tasks_pb2.TASK_STATE_DEAD_LETTERED)
    (run,) = stack.runs(ns, "rejected")
    assert run.error_type == "NonRetryableError"


def test_cancel_before_due_never_runs(stack: Stack, ns: str) -> None:
    create(stack, ns, "cancel-me", delay=to_duration(1_500))
    create(stack, ns, "witness", delay=to_duration(1_500))
    cancelled = stack.tasks.CancelTask(
        tasks_pb2.CancelTaskRequest(namespace=ns, task_id="cancel-me")
    )
    assert cancelled.state == tasks_pb2.TASK_STATE_CANCELLED
    eventually(lambda: state_of(stack, ns, "witness") == tasks_pb2.TASK_STATE_SUCCEEDED)
    time.sleep(1.0)  # past the witness, which was due at the same time: still no run
    assert stack.runs(ns, "cancel-me") == []
    assert not [
        e for e in stack.executions() if (e["namespace"], e["task_id"]) == (ns, "cancel-me")
    ]
    # Cancelling again is harmless; cancelling a finished task is refused.
    again = stack.tasks.CancelTask(tasks_pb2.CancelTaskRequest(namespace=ns, task_id="cancel-me"))
    assert again.state == tasks_pb2.TASK_STATE_CANCELLED
    with pytest.raises(grpc.RpcError) as info:
        stack.tasks.CancelTask(tasks_pb2.CancelTaskRequest(namespace=ns, task_id="witness"))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_idempotent_create(stack: Stack, ns: str) -> None:
    req = tasks_pb2.CreateTaskRequest(
        namespace=ns,
        task_id="once",
        queue="e2e",
        handler="record",
        payload=b"x",
        delay=to_duration(60_000),
    )
    first = stack.tasks.CreateTask(req)
    time.sleep(0.05)  # a retry of the same request arrives later: still the same task
    second = stack.tasks.CreateTask(req)
    assert first.created and not second.created
    assert first.task == second.task
    req.payload = b"different"
    with pytest.raises(grpc.RpcError) as info:
        stack.tasks.CreateTask(req)
    assert info.value.code() == grpc.StatusCode.ALREADY_EXISTS


BAD_CREATES = [
    ("queue", {"queue": ""}),
    ("queue", {"queue": "has space"}),
    ("handler", {"handler": ""}),
    ("payload", {"payload": b"x" * (256 * 1024 + 1)}),
    ("task_id", {"task_id": "x" * 129}),
    ("task_id", {"task_id": "bad\nid"}),
    ("namespace", {"namespace": "no/slashes"}),
    ("run_at", {"run_at": to_timestamp(time.time_ns() // 1_000_000 + 11 * 366 * 86_400_000)}),
    ("delay", {"delay": Duration(seconds=-5)}),
    ("retry_policy.max_attempts", {"retry_policy": tasks_pb2.RetryPolicy(max_attempts=0)}),
    ("retry_policy.multiplier", {"retry_policy": tasks_pb2.RetryPolicy(multiplier=0.5)}),
    ("retry_policy.jitter", {"retry_policy": tasks_pb2.RetryPolicy(jitter=1.5)}),
    (
        "retry_policy.initial_backoff",
        {
            "retry_policy": tasks_pb2.RetryPolicy(
                initial_backoff=to_duration(10_000), max_backoff=to_duration(1_000)
            )
        },
    ),
    ("labels", {"labels": {"bad key!": "v"}}),
]


@pytest.mark.parametrize(("field", "fields"), BAD_CREATES, ids=[f for f, _ in BAD_CREATES])
def test_bad_create_is_invalid_argument_naming_the_field(
    stack: Stack, ns: str, field: str, fields: dict[str, object]
) -> None:
    base: dict[str, object] = {
        "namespace": ns,
        "task_id": "bad",
        "queue": "e2e",
        "handler": "record",
    }
    req = tasks_pb2.CreateTaskRequest(**{**base, **fields})  # type: ignore[arg-type]
    with pytest.raises(grpc.RpcError) as info:
        stack.tasks.CreateTask(req)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert str(info.value.details()).startswith(field), info.value.details()
    # Nothing was written.
    listed = stack.tasks.ListTasks(tasks_pb2.ListTasksRequest(namespace=ns, queue="e2e"))
    assert list(listed.tasks) == []


def test_lookups_report_not_found_and_bad_paging(stack: Stack, ns: str) -> None:
    cases: list[tuple[Callable[[], object], grpc.StatusCode]] = [
        (
            lambda: stack.tasks.GetTask(tasks_pb2.GetTaskRequest(namespace=ns, task_id="nope")),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            lambda: stack.history.GetRun(history_pb2.GetRunRequest(namespace=ns, run_id="nope")),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            lambda: stack.tasks.ListTasks(
                tasks_pb2.ListTasksRequest(namespace=ns, queue="e2e", page_token="%%%")
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda: stack.tasks.ListTasks(
                tasks_pb2.ListTasksRequest(namespace=ns, queue="e2e", page_size=5000)
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda: stack.tasks.ListTasks(tasks_pb2.ListTasksRequest(namespace=ns)),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda: stack.history.RedriveTask(
                history_pb2.RedriveTaskRequest(namespace=ns, task_id="nope")
            ),
            grpc.StatusCode.NOT_FOUND,
        ),
    ]
    for call, code in cases:
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code() == code


def test_batch_create_reports_every_item(stack: Stack, ns: str) -> None:
    create(stack, ns, "taken", payload=b"original", delay=to_duration(60_000))

    def item(task_id: str, **kw: object) -> tasks_pb2.CreateTaskRequest:
        fields: dict[str, object] = {
            "namespace": ns,
            "task_id": task_id,
            "queue": "e2e",
            "handler": "record",
            "delay": to_duration(60_000),
        }
        return tasks_pb2.CreateTaskRequest(**{**fields, **kw})  # type: ignore[arg-type]

    chunks = [
        tasks_pb2.CreateTasksRequest(tasks=[item("b0"), item("b1", queue=""), item("b2")]),
        tasks_pb2.CreateTasksRequest(tasks=[item("taken", payload=b"other"), item("b4")]),
    ]
    resp = stack.tasks.CreateTasks(iter(chunks), timeout=30)
    codes = [(r.index, grpc.StatusCode.OK.value[0] == r.code) for r in resp.results]
    assert codes == [(0, True), (1, False), (2, True), (3, False), (4, True)]
    assert (resp.accepted, resp.rejected) == (3, 2)
    assert resp.results[1].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert resp.results[3].code == grpc.StatusCode.ALREADY_EXISTS.value[0]
    listed = stack.tasks.ListTasks(tasks_pb2.ListTasksRequest(namespace=ns, queue="e2e"))
    assert sorted(t.id for t in listed.tasks) == ["b0", "b2", "b4", "taken"]
    assert stack.task(ns, "taken").payload == b"original"


def test_runs_by_queue_and_status_in_a_time_range(stack: Stack, ns: str) -> None:
    start = now_ms()
    create(stack, ns, "ok")
    create(stack, ns, "bad", handler="always_fail", retry_policy=fast_retry(1))
    eventually(lambda: state_of(stack, ns, "bad") == tasks_pb2.TASK_STATE_DEAD_LETTERED)
    eventually(lambda: state_of(stack, ns, "ok") == tasks_pb2.TASK_STATE_SUCCEEDED)
    req = history_pb2.ListRunsRequest(
        namespace=ns,
        queue="e2e",
        start_time=to_timestamp(start),
        status=history_pb2.RUN_STATUS_DEAD_LETTERED,
    )
    assert [r.task_id for r in stack.history.ListRuns(req).runs] == ["bad"]
    req.status = history_pb2.RUN_STATUS_UNSPECIFIED
    assert sorted(r.task_id for r in stack.history.ListRuns(req).runs) == ["bad", "ok"]


def test_health_serving_and_reflection_lists_services(stack: Stack) -> None:
    with grpc.insecure_channel(stack.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        resp = health.Check(health_pb2.HealthCheckRequest(service="tikk.v1.TaskService"))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        refl = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = refl.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        names = {s.name for a in answers for s in a.list_services_response.service}
    assert {"tikk.v1.TaskService", "tikk.v1.HistoryService", "tikk.v1.WorkerService"} <= names


def test_reflection_v1_answers_as_grpcurl_asks_it(stack: Stack) -> None:
    # grpcurl and most tools ask grpc.reflection.v1 first; its messages are v1alpha's.
    with grpc.insecure_channel(stack.address) as channel:
        v1 = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        asks = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="tikk.v1.TaskService"),
        ]
        listed, described = list(v1(iter(asks), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {"tikk.v1.TaskService", "grpc.reflection.v1.ServerReflection"} <= names
    files = described.file_descriptor_response.file_descriptor_proto
    parsed = [descriptor_pb2.FileDescriptorProto.FromString(f) for f in files]
    assert "TaskService" in {svc.name for f in parsed for svc in f.service}


def test_start_timeouts_dead_letter_what_nobody_starts_and_spare_what_runs(
    stack: Stack, ns: str
) -> None:
    create(stack, ns, "consumed", start_timeout=to_duration(3_000))
    orphan = tasks_pb2.CreateTaskRequest(
        namespace=ns, task_id="orphan", queue="nobody", handler="record",
        start_timeout=to_duration(2_000),
    )  # fmt: skip
    created = stack.tasks.CreateTask(orphan, timeout=10).task
    assert created.start_timeout.ToMilliseconds() == 2_000
    eventually(lambda: state_of(stack, ns, "consumed") == tasks_pb2.TASK_STATE_SUCCEEDED)
    eventually(lambda: state_of(stack, ns, "orphan") == tasks_pb2.TASK_STATE_DEAD_LETTERED)
    dead = stack.task(ns, "orphan")
    assert dead.last_error_type == "StartTimeout"
    assert "'nobody'" in dead.last_error_message
    assert [e["task_id"] for e in stack.executions() if e["namespace"] == ns] == ["consumed"]
    bad = tasks_pb2.CreateTaskRequest(
        namespace=ns, queue="e2e", handler="record", start_timeout=to_duration(500)
    )
    with pytest.raises(grpc.RpcError) as refused:
        stack.tasks.CreateTask(bad, timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "start_timeout" in (refused.value.details() or "")
