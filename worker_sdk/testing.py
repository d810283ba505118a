"""Testing a handler without a server: ``run_task`` runs it in-process, the way a Worker
would (the worker's middleware and the handler's limits, payload decoding, timeout and output
encoding), on a made-up delivery, and returns its ``RunOutcome``::

    from worker_sdk.testing import run_task

    async def test_welcome_mail_retries_while_the_mail_server_is_down():
        outcome = await run_task(worker, "send_welcome", Signup(email="a@b.c"), attempt=2)
        assert outcome.retry_after_s == 30

For a test against a real server, ``worker_sdk.pytest_plugin`` starts an embedded tikk.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tikk.payload_codec import decode_payload, encode_payload
from tikk.v1 import worker_pb2
from worker_sdk.handlers import HandlerOptions
from worker_sdk.queues.consumer import Message
from worker_sdk.worker import Worker

_KINDS = {
    worker_pb2.RESULT_KIND_SUCCEEDED: "succeeded",
    worker_pb2.RESULT_KIND_FAILED: "failed",
    worker_pb2.RESULT_KIND_RETRY: "retry",
    worker_pb2.RESULT_KIND_FAILED_PERMANENTLY: "failed_permanently",
}
_T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: the made-up delivery's times


@dataclass(frozen=True)
class RunOutcome:
    """What one run came to, as the worker would report it.

    ``kind``: ``succeeded``, ``failed`` (retried per the task's policy), ``retry`` (after
    ``retry_after_s``, the handler asked) or ``failed_permanently`` (dead-lettered at once).
    """

    kind: str
    output: bytes
    error_type: str
    error_message: str
    traceback: str
    retry_after_s: float | None

    @property
    def succeeded(self) -> bool:
        return self.kind == "succeeded"

    @property
    def retried(self) -> bool:
        """Whether the task would run again (unless this was its last attempt)."""
        return self.kind in ("failed", "retry")

    @property
    def failed_permanently(self) -> bool:
        return self.kind == "failed_permanently"

    def value(self, as_type: Any = Any) -> Any:
        """The output decoded as ``as_type`` (JSON by default; ``bytes`` for the raw output)."""
        return decode_payload(self.output, as_type)


@dataclass(frozen=True)
class FakeDelivery:
    """The made-up delivery of a test run; every field has a plausible default."""

    namespace: str = "default"
    task_id: str = "test-task"
    queue: str = "test"
    attempt: int = 1
    max_attempts: int = 3
    labels: Mapping[str, str] | None = None
    delivery_count: int = 1
    due_ms: int = _T0_MS
    # The task's own execution timeout (0: none, the handler's applies).
    execution_timeout_ms: int = 0


async def run_task(
    target: Worker | Callable[..., Any],
    handler: str | None = None,
    payload: object = b"",
    *,
    delivery: FakeDelivery | None = None,
    options: HandlerOptions | None = None,
    **fields: Any,
) -> RunOutcome:
    """Run ``handler`` of the worker ``target`` (or the function ``target`` itself, with
    ``options``) on ``payload`` (bytes, or any value the client would encode: a dataclass, a
    dict, ...). ``delivery``, or its fields as keywords (``attempt=2``, ``labels={...}``), makes
    up the rest. Nothing is reported anywhere."""
    d = delivery or FakeDelivery(**fields)
    worker, name = _worker_of(target, handler, d.queue, options)
    message = Message(_delivery(d, name, encode_payload(payload)), d.delivery_count, None)
    return _outcome(await worker.execute(message))


def run_task_sync(
    target: Worker | Callable[..., Any], handler: str | None = None, payload: object = b"",
    **fields: Any,
) -> RunOutcome:  # fmt: skip
    """``run_task`` from synchronous code (a test without an event loop)."""
    return asyncio.run(run_task(target, handler, payload, **fields))


def _worker_of(
    target: Worker | Callable[..., Any], handler: str | None, queue: str,
    options: HandlerOptions | None,
) -> tuple[Worker, str]:  # fmt: skip
    if isinstance(target, Worker):
        if handler is None:
            raise ValueError("name the handler of the worker to run")
        return target, handler
    name = handler or str(getattr(target, "__name__", "handler"))
    worker = Worker([queue], concurrency=1, worker_id=f"test-{os.getpid()}")
    worker.register(name, target, options)
    return worker, name


def _delivery(d: FakeDelivery, handler: str, payload: bytes) -> worker_pb2.Delivery:
    made = worker_pb2.Delivery(
        namespace=d.namespace, task_id=d.task_id, queue=d.queue, handler=handler,
        payload=payload, labels=dict(d.labels or {}), attempt=d.attempt,
        max_attempts=d.max_attempts, idempotency_key=f"{d.namespace}/{d.task_id}@{d.due_ms}",
    )  # fmt: skip
    for stamp in (made.scheduled_time, made.due_time, made.fired_time):
        stamp.FromMilliseconds(d.due_ms)
    if d.execution_timeout_ms:
        made.execution_timeout.FromMilliseconds(d.execution_timeout_ms)
    return made


def _outcome(result: worker_pb2.RunResult) -> RunOutcome:
    retry = result.retry_after.ToMilliseconds() / 1000 if result.HasField("retry_after") else None
    return RunOutcome(
        kind=_KINDS.get(result.kind, "unknown"),
        output=result.output,
        error_type=result.error_type,
        error_message=result.error_message,
        traceback=result.traceback,
        retry_after_s=retry,
    )
