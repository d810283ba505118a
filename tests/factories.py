"""Building domain objects for tests."""

from __future__ import annotations

from tikk.buckets import shard_of
from tikk.model import RetryPolicy, RunRecord, RunStatus, Task, TaskState, fingerprint
from tikk.schedules.model import Schedule, ScheduleAction, SchedulePolicy
from tikk.schedules.spec import ScheduleSpec

T0 = 1_700_000_000_000  # a fixed instant (2023-11-14T22:13:20Z), on a minute boundary + 20 s


def make_task(
    task_id: str = "t1",
    *,
    due_ms: int = T0 + 10_000,
    namespace: str = "default",
    queue: str = "q",
    handler: str = "h",
    payload: bytes = b"p",
    shard_count: int = 16,
    max_attempts: int = 3,
    created_ms: int = T0,
) -> Task:
    return Task(
        namespace=namespace,
        task_id=task_id,
        queue=queue,
        handler=handler,
        payload=payload,
        labels={"team": "a"},
        retry=RetryPolicy(max_attempts=max_attempts),
        state=TaskState.SCHEDULED,
        attempt=1,
        due_ms=due_ms,
        scheduled_ms=due_ms,
        created_ms=created_ms,
        updated_ms=created_ms,
        shard=shard_of(namespace, task_id, shard_count),
        fingerprint=fingerprint(namespace, task_id, queue, handler, payload, due_ms),
    )


def make_run(
    run_id: str,
    *,
    task_id: str = "t1",
    finished_ms: int = T0,
    status: RunStatus = RunStatus.SUCCEEDED,
    queue: str = "q",
    namespace: str = "default",
    attempt: int = 1,
    recorded_ms: int | None = None,
) -> RunRecord:
    """A run; the server recorded it when it finished unless ``recorded_ms`` says otherwise."""
    return RunRecord(
        namespace=namespace,
        run_id=run_id,
        task_id=task_id,
        queue=queue,
        handler="h",
        attempt=attempt,
        status=status,
        scheduled_ms=finished_ms - 100,
        due_ms=finished_ms - 100,
        fired_ms=finished_ms - 90,
        started_ms=finished_ms - 80,
        finished_ms=finished_ms,
        recorded_ms=finished_ms if recorded_ms is None else recorded_ms,
        worker_id="w1",
        error_type="" if status is RunStatus.SUCCEEDED else "ValueError",
        error_message="" if status is RunStatus.SUCCEEDED else "boom",
        output=b"out",
        idempotency_key=f"{namespace}/{task_id}@{finished_ms - 100}",
    )


def make_schedule(
    schedule_id: str = "s1",
    *,
    namespace: str = "default",
    cron: str = "",
    interval_ms: int = 60_000,
    next_nominal_ms: int | None = T0 + 40_000,
    shard_count: int = 16,
    policy: SchedulePolicy | None = None,
    payload: bytes = b"p",
) -> Schedule:
    """A schedule whose pending occurrence is ``next_nominal_ms`` (no jitter)."""
    return Schedule(
        namespace=namespace,
        schedule_id=schedule_id,
        spec=ScheduleSpec(cron=cron, interval_ms=0 if cron else interval_ms),
        action=ScheduleAction(queue="q", handler="h", payload=payload, labels={"team": "a"}),
        policy=policy or SchedulePolicy(),
        shard=shard_of(namespace, schedule_id, shard_count),
        created_ms=T0,
        updated_ms=T0,
        fingerprint=fingerprint(namespace, schedule_id, cron, interval_ms, payload),
        next_nominal_ms=next_nominal_ms,
        next_fire_ms=next_nominal_ms,
    )
