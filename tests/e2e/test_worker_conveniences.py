"""The worker SDK's conveniences against real processes (``tikk dev`` and a ``tikk worker``
running ``tests.e2e.conveniences_app``): typed payloads in and out, a handler's timeout, a
slow handler that does not starve another, and a running task cancelled."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.e2e.conftest import Stack
from tests.e2e.conveniences_app import Invoice
from tests.waiting import eventually
from tikk.client import Client, TaskSpec
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import history_pb2, tasks_pb2

pytestmark = pytest.mark.e2e
APP = "tests.e2e.conveniences_app:worker"


@pytest.fixture(scope="module")
def conv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("conv"))
    s.start_server()
    s.start_worker(APP)
    yield s
    s.close()


def create(stack: Stack, ns: str, task_id: str, handler: str, **kw: object) -> None:
    req = tasks_pb2.CreateTaskRequest(
        namespace=ns, task_id=task_id, queue="conv", handler=handler, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    stack.tasks.CreateTask(req, timeout=10)


def finished(stack: Stack, ns: str, task_id: str) -> tasks_pb2.Task | None:
    task = stack.task(ns, task_id)
    done = (tasks_pb2.TASK_STATE_SUCCEEDED, tasks_pb2.TASK_STATE_DEAD_LETTERED,
            tasks_pb2.TASK_STATE_CANCELLED)  # fmt: skip
    return task if task.state in done else None


def logged(stack: Stack, task_id: str, event: str) -> list[dict[str, Any]]:
    return [e for e in stack.executions() if e["task_id"] == task_id and e["event"] == event]


def times(stack: Stack, task_ids: list[str], event: str) -> list[int]:
    return sorted(int(e["at_ms"]) for t in task_ids for e in logged(stack, t, event))


def test_a_typed_handler_decodes_its_payload_and_a_bad_one_is_dead_lettered_at_once(
    conv: Stack, ns: str
) -> None:
    with Client(conv.address, namespace=ns) as client:  # the client encodes the dataclass
        client.create_task(TaskSpec("conv", "pay", Invoice("c1", 21), task_id="good"))
    create(conv, ns, "bad", "pay", payload=b'{"customer": "c1"}',
           retry_policy=tasks_pb2.RetryPolicy(max_attempts=5))  # fmt: skip
    good = eventually(lambda: finished(conv, ns, "good"), timeout=30)
    assert good.state == tasks_pb2.TASK_STATE_SUCCEEDED
    (run,) = conv.runs(ns, "good")
    assert json.loads(run.output) == {"customer": "c1", "total": 42}
    bad = eventually(lambda: finished(conv, ns, "bad"), timeout=30)
    assert bad.state == tasks_pb2.TASK_STATE_DEAD_LETTERED and bad.attempt == 1
    (failed,) = conv.runs(ns, "bad")
    assert failed.error_type == "InvalidPayload"
    assert failed.error_message == "handler 'pay': payload: missing field(s) 'cents'"


def test_a_handler_past_its_timeout_is_stopped_recorded_and_retried(conv: Stack, ns: str) -> None:
    policy = tasks_pb2.RetryPolicy(max_attempts=2, initial_backoff=to_duration(100))
    create(conv, ns, "hangs", "hang", retry_policy=policy)
    task = eventually(lambda: finished(conv, ns, "hangs"), timeout=30)
    assert task.state == tasks_pb2.TASK_STATE_DEAD_LETTERED
    runs = conv.runs(ns, "hangs")
    assert [r.status for r in runs] == [
        history_pb2.RUN_STATUS_FAILED, history_pb2.RUN_STATUS_DEAD_LETTERED,
    ]  # fmt: skip
    for r in runs:
        assert r.error_type == "HandlerTimeout" and "timeout of 0.5 s" in r.error_message
        took = r.finish_time.ToMilliseconds() - r.start_time.ToMilliseconds()
        assert 450 <= took < 5_000, took


def test_a_slow_handler_at_its_limit_does_not_starve_another(conv: Stack, ns: str) -> None:
    """Two slow runs at a time, 2 s each: eight take 8 s. Queued behind them, the fast tasks
    still run at once, since the slow runs that wait for their handler's limit hold none of
    the worker's four slots."""
    due = to_timestamp(int(time.time() * 1000) + 1_000)
    for i in range(8):
        create(conv, ns, f"slow-{i}", "slow", run_at=due)
    for i in range(6):
        create(conv, ns, f"fast-{i}", "fast", run_at=due)
    fast = [f"fast-{i}" for i in range(6)]
    eventually(lambda: all(finished(conv, ns, t) for t in fast), timeout=30)
    fast_done = max(r.finish_time.ToMilliseconds() for t in fast for r in conv.runs(ns, t))
    slow = [f"slow-{i}" for i in range(8)]
    slow_starts = times(conv, slow, "start")
    # When the last fast task finished, at most the first two slow runs had started.
    assert sum(1 for at in slow_starts if at <= fast_done) <= 2, (fast_done, slow_starts)
    eventually(lambda: all(finished(conv, ns, t) for t in slow), timeout=60)
    starts, ends = times(conv, slow, "start"), times(conv, slow, "end")
    at_once = max(sum(1 for s in starts if s <= t) - sum(1 for e in ends if e <= t) for t in starts)
    assert at_once <= 2


@pytest.mark.parametrize("handler", ["long_async", "long_thread"])
def test_a_cancelled_running_task_stops_within_a_second_recorded_as_cancelled(
    conv: Stack, handler: str
) -> None:
    ns, task_id = "t-" + uuid.uuid4().hex[:12], f"runs-{uuid.uuid4().hex[:8]}"
    create(conv, ns, task_id, handler)
    eventually(lambda: logged(conv, task_id, "start") and
               conv.task(ns, task_id).state == tasks_pb2.TASK_STATE_DISPATCHED)  # fmt: skip
    time.sleep(0.3)  # the run has been going a while
    cancelled = conv.tasks.CancelTask(
        tasks_pb2.CancelTaskRequest(namespace=ns, task_id=task_id, stop_running=True), timeout=10
    )
    asked = time.time_ns() // 1_000_000
    assert cancelled.state == tasks_pb2.TASK_STATE_CANCELLED
    (run,) = eventually(lambda: conv.runs(ns, task_id), timeout=20)
    assert run.status == history_pb2.RUN_STATUS_CANCELLED and run.error_type == "RunCancelled"
    assert run.finish_time.ToMilliseconds() - asked < 1_000
    (end,) = logged(conv, task_id, "end")
    assert end["cancelled"] == "cancel requested"
    assert conv.task(ns, task_id).state == tasks_pb2.TASK_STATE_CANCELLED


def test_without_stop_running_a_running_task_is_not_cancelled(conv: Stack, ns: str) -> None:
    """The older answer stays: an OK cancel means the task never runs."""
    task_id = f"keeps-{uuid.uuid4().hex[:8]}"
    create(conv, ns, task_id, "long_async")
    eventually(lambda: conv.task(ns, task_id).state == tasks_pb2.TASK_STATE_DISPATCHED)
    with pytest.raises(grpc.RpcError) as refused:
        conv.tasks.CancelTask(tasks_pb2.CancelTaskRequest(namespace=ns, task_id=task_id))
    assert refused.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert conv.task(ns, task_id).state == tasks_pb2.TASK_STATE_DISPATCHED
    conv.tasks.CancelTask(  # not left running for the module's other tests
        tasks_pb2.CancelTaskRequest(namespace=ns, task_id=task_id, stop_running=True)
    )


def test_a_tasks_own_execution_timeout_replaces_its_handlers(conv: Stack, ns: str) -> None:
    """long_async has no timeout of its own; the task's 1 s stops its run."""
    create(conv, ns, "bounded", "long_async", execution_timeout=to_duration(1_000),
           retry_policy=tasks_pb2.RetryPolicy(max_attempts=1))  # fmt: skip
    task = eventually(lambda: finished(conv, ns, "bounded"), timeout=30)
    assert task.state == tasks_pb2.TASK_STATE_DEAD_LETTERED
    assert task.execution_timeout.ToMilliseconds() == 1_000
    (run,) = conv.runs(ns, "bounded")
    assert run.error_type == "HandlerTimeout" and "timeout of 1 s" in run.error_message
    took = run.finish_time.ToMilliseconds() - run.start_time.ToMilliseconds()
    assert 950 <= took < 5_000, took
    with pytest.raises(grpc.RpcError) as refused:
        create(conv, ns, "too-short", "fast", execution_timeout=to_duration(10))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "execution_timeout" in str(refused.value.details())
