"""The workload: a client creating tasks at a steady rate and cancelling some, one at a
time or a batch at a time by a bulk action over their label, recording every call.

Tasks have client-chosen ids and an absolute ``run_at`` fixed in the plan, so a create whose
outcome is unknown (UNAVAILABLE, DEADLINE_EXCEEDED) is retried with identical content and
cannot create a second task. A "due now" task asks to run at the instant it is created. Calls
run on a pool of threads, so a server that is down stalls a few creates, not the pace.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import grpc

from devtools.faults.records import (
    CANCEL_FENCE_MS,
    INDETERMINATE,
    OK,
    BulkCancelRecord,
    Call,
    CancelRecord,
    CreateRecord,
    TaskKind,
    TaskPlan,
)
from devtools.faults.worker_app import QUEUE
from tikk.client.transport import Transport
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import bulk_pb2, bulk_pb2_grpc, tasks_pb2, tasks_pb2_grpc

log = logging.getLogger("devtools.faults")
# Reconnect quickly to a restarted server (gRPC's default backoff grows to two minutes).
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1_000),
]


@dataclass(frozen=True)
class WorkloadSpec:
    """Shape of the workload. Shares are of all tasks; due-now applies to tasks that are not
    to be cancelled. Leads are seconds from creation to due."""

    rate_per_s: float
    duration_s: float
    lead_s: tuple[float, float] = (3.0, 25.0)
    due_now_share: float = 0.02
    fail_once_share: float = 0.05
    always_fail_share: float = 0.01
    cancel_share: float = 0.02
    cancel_lead_s: tuple[float, float] = (12.0, 25.0)
    cancel_before_s: tuple[float, float] = (4.0, 8.0)
    # Bulk-cancelled tasks come in batches, each cancelled half a second after its last
    # create; their lead keeps every one of them well ahead of the cancel fence.
    bulk_cancel_share: float = 0.03
    bulk_batch: int = 4
    bulk_lead_s: tuple[float, float] = (20.0, 30.0)
    max_attempts: int = 3
    initial_backoff_ms: int = 1_000
    max_backoff_ms: int = 4_000
    call_timeout_s: float = 5.0
    max_calls: int = 8
    retry_budget_s: float = 60.0
    threads: int = 64

    @property
    def task_count(self) -> int:
        return int(self.rate_per_s * self.duration_s)


def _kind(spec: WorkloadSpec, r: float) -> TaskKind:
    bounds = [
        (spec.cancel_share, TaskKind.CANCEL),
        (spec.bulk_cancel_share, TaskKind.BULK_CANCEL),
        (spec.always_fail_share, TaskKind.ALWAYS_FAIL),
        (spec.fail_once_share, TaskKind.FAIL_ONCE),
    ]
    for share, kind in bounds:
        if r < share:
            return kind
        r -= share
    return TaskKind.OK


def plan_tasks(spec: WorkloadSpec, rng: random.Random, start_ms: int) -> list[TaskPlan]:
    """The tasks of a run, created evenly over ``duration_s`` from ``start_ms``."""
    plans = []
    batched = 0
    for i in range(spec.task_count):
        create_at = start_ms + int(i * 1000 / spec.rate_per_s)
        kind = _kind(spec, rng.random())
        cancelled = kind in (TaskKind.CANCEL, TaskKind.BULK_CANCEL)
        due_now = not cancelled and rng.random() < spec.due_now_share
        cancel_at = None
        batch = ""
        if kind is TaskKind.BULK_CANCEL:
            due = create_at + int(rng.uniform(*spec.bulk_lead_s) * 1000)
            batch = f"b{batched // spec.bulk_batch}"
            batched += 1
        elif kind is TaskKind.CANCEL:
            due = create_at + int(rng.uniform(*spec.cancel_lead_s) * 1000)
            cancel_at = due - int(rng.uniform(*spec.cancel_before_s) * 1000)
        elif due_now:
            due = create_at
        else:
            due = create_at + int(rng.uniform(*spec.lead_s) * 1000)
        task_id = f"t{i:06d}-{kind.value}{'-now' if due_now else ''}"
        plans.append(TaskPlan(task_id, kind, create_at, due, due_now, cancel_at, batch))
    return plans


def batches(plans: list[TaskPlan]) -> dict[str, list[TaskPlan]]:
    """The bulk-cancel batches of a plan, by label value."""
    found: dict[str, list[TaskPlan]] = {}
    for p in plans:
        if p.batch:
            found.setdefault(p.batch, []).append(p)
    return found


def create_request(plan: TaskPlan, spec: WorkloadSpec, namespace: str) -> Any:
    """The create request of a plan: the same bytes on every retry."""
    policy = tasks_pb2.RetryPolicy(
        max_attempts=spec.max_attempts,
        initial_backoff=to_duration(spec.initial_backoff_ms),
        multiplier=2.0,
        max_backoff=to_duration(spec.max_backoff_ms),
        jitter=0.5,
    )
    return tasks_pb2.CreateTaskRequest(
        namespace=namespace,
        task_id=plan.task_id,
        queue=QUEUE,
        handler=plan.kind.handler,
        payload=plan.task_id.encode(),
        retry_policy=policy,
        run_at=to_timestamp(plan.due_ms),
        labels={"batch": plan.batch} if plan.batch else {},
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _call(fn: Callable[..., Any], request: Any, timeout_s: float) -> Call:
    """One RPC, timed, reduced to its status code name."""
    sent = _now_ms()
    try:
        fn(request, timeout=timeout_s)
        code = OK
    except grpc.RpcError as exc:
        code = exc.code().name
    return Call(sent, _now_ms(), code)


def create_now(
    address: str, request: Any, timeout_s: float = 30.0, transport: Transport | None = None
) -> None:
    """One create on a channel of its own (over ``transport``, plaintext if None), waiting
    for the server to be up; raises ``grpc.RpcError`` if it fails."""
    with (transport or Transport()).channel(address, CHANNEL_OPTIONS) as channel:
        stub: Any = tasks_pb2_grpc.TaskServiceStub(channel)
        stub.CreateTask(request, timeout=timeout_s, wait_for_ready=True)


class Workload:
    """Runs a plan against a server: creates at their planned instants, cancels at theirs."""

    def __init__(
        self,
        address: str,
        namespace: str,
        plans: list[TaskPlan],
        spec: WorkloadSpec,
        transport: Transport | None = None,
    ) -> None:
        self.namespace = namespace
        self.plans = plans
        self.spec = spec
        self._channel = (transport or Transport()).channel(address, CHANNEL_OPTIONS)
        self._stub: Any = tasks_pb2_grpc.TaskServiceStub(self._channel)
        self._bulk: Any = bulk_pb2_grpc.BulkServiceStub(self._channel)
        self._bulk_cancels: dict[str, BulkCancelRecord] = {}
        self._pool = ThreadPoolExecutor(spec.threads, thread_name_prefix="workload")
        self._lock = threading.Lock()
        self._creates: dict[str, CreateRecord] = {}
        self._cancels: dict[str, CancelRecord] = {}
        self._calls: list[Future[None]] = []
        self._stop = threading.Event()
        self._pacer = threading.Thread(target=self._pace, name="workload-pacer", daemon=True)

    def start(self) -> None:
        self._pacer.start()

    def stop(self) -> None:
        """Send nothing more (calls in flight finish)."""
        self._stop.set()

    @property
    def pacing(self) -> bool:
        """Whether creates of the plan are still to be sent."""
        return self._pacer.is_alive()

    def join(self, timeout_s: float) -> bool:
        """Wait for the plan and every call to finish. If that takes longer than
        ``timeout_s``, stop retrying, wait for the calls in flight and return ``False``."""
        deadline = time.monotonic() + timeout_s
        self._pacer.join(timeout_s)
        remaining = max(0.0, deadline - time.monotonic())
        done = not self._pacer.is_alive() and not wait(self._calls, remaining).not_done
        if not done:
            self.stop()
            self._pacer.join()
            wait(self._calls)
        return done

    def close(self) -> None:
        self.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._channel.close()

    def records(self) -> tuple[tuple[CreateRecord, ...], tuple[CancelRecord, ...]]:
        with self._lock:
            return tuple(self._creates.values()), tuple(self._cancels.values())

    def bulk_records(self) -> tuple[BulkCancelRecord, ...]:
        with self._lock:
            return tuple(self._bulk_cancels.values())

    def accepted(self, task_id: str) -> bool:
        with self._lock:
            record = self._creates.get(task_id)
        return record is not None and record.accepted

    def _pace(self) -> None:
        """Submit every create and cancel at its instant, in time order."""
        events: list[tuple[int, int, str, Any]] = []
        for n, p in enumerate(self.plans):
            events.append((p.create_at_ms, n, "create", p))
            if p.cancel_at_ms is not None:
                events.append((p.cancel_at_ms, n, "cancel", p))
        for n, batch in enumerate(batches(self.plans).values(), len(self.plans)):
            events.append((max(p.create_at_ms for p in batch) + 500, n, "bulk", batch))
        heapq.heapify(events)
        while events and not self._stop.is_set():
            at, _, what, plan = heapq.heappop(events)
            delay = (at - _now_ms()) / 1000
            if delay > 0 and self._stop.wait(delay):
                break
            actions: dict[str, Callable[[Any], None]] = {
                "create": self._create, "cancel": self._cancel, "bulk": self._bulk_cancel,
            }  # fmt: skip
            self._calls.append(self._pool.submit(actions[what], plan))

    def _create(self, plan: TaskPlan) -> None:
        """Create until the outcome is known (or the retries are used up)."""
        request = create_request(plan, self.spec, self.namespace)
        calls: list[Call] = []
        began = time.monotonic()
        while True:
            calls.append(_call(self._stub.CreateTask, request, self.spec.call_timeout_s))
            self._record_create(plan, calls)
            if calls[-1].code not in INDETERMINATE or self._give_up(calls, began):
                return
            time.sleep(min(2.0, 0.25 * 2 ** (len(calls) - 1)))

    def _give_up(self, calls: list[Call], began: float) -> bool:
        spent = time.monotonic() - began
        used_up = len(calls) >= self.spec.max_calls or spent > self.spec.retry_budget_s
        return used_up or self._stop.is_set()

    def _record_create(self, plan: TaskPlan, calls: list[Call]) -> None:
        record = CreateRecord(
            plan.task_id, plan.kind, plan.due_ms, plan.due_now, self.spec.max_attempts,
            tuple(calls),
        )  # fmt: skip
        with self._lock:
            self._creates[plan.task_id] = record

    def _cancel(self, plan: TaskPlan) -> None:
        """Cancel an accepted task; an unknown outcome is retried while the fence allows
        (cancelling a cancelled task is a no-op, so a retry is harmless)."""
        if not self.accepted(plan.task_id):
            return  # never accepted (or not yet): nothing to take back
        request = tasks_pb2.CancelTaskRequest(namespace=self.namespace, task_id=plan.task_id)
        calls: list[Call] = []
        while True:
            calls.append(_call(self._stub.CancelTask, request, self.spec.call_timeout_s))
            with self._lock:
                self._cancels[plan.task_id] = CancelRecord(plan.task_id, tuple(calls))
            fence = plan.due_ms - CANCEL_FENCE_MS - 500
            settled = calls[-1].code not in INDETERMINATE
            if settled or _now_ms() >= fence or len(calls) >= 5 or self._stop.is_set():
                return
            time.sleep(0.5)

    def _bulk_cancel(self, batch: list[TaskPlan]) -> None:
        """Cancel a batch by its label through one bulk action, sent again with the same
        action id while its outcome is unknown (so it starts once)."""
        if not any(self.accepted(p.task_id) for p in batch):
            return
        label = batch[0].batch
        found = bulk_pb2.TaskFilter(namespace=self.namespace, label_selector=f"batch={label}")
        request = bulk_pb2.BulkActionRequest(filter=found, action_id=f"cancel-{label}")
        ids = tuple(p.task_id for p in batch)
        calls: list[Call] = []
        began = time.monotonic()
        while True:
            calls.append(_call(self._bulk.BulkCancelTasks, request, self.spec.call_timeout_s))
            with self._lock:
                self._bulk_cancels[label] = BulkCancelRecord(label, ids, tuple(calls))
            if calls[-1].code not in INDETERMINATE or self._give_up(calls, began):
                return
            time.sleep(min(2.0, 0.25 * 2 ** (len(calls) - 1)))  # a server restarting
