"""A Worker's handler conveniences, run in-process through the test harness
(``worker_sdk.testing``) on the same path a worker runs: typed payloads, timeouts, middleware,
per-handler limits, and the harness's own outcomes."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from worker_sdk import NonRetryableError, Retry, RunHooks, TaskContext, Worker
from worker_sdk.gates import HandlerGates
from worker_sdk.handlers import HandlerOptions, handler_spec
from worker_sdk.testing import run_task, run_task_sync


@dataclass(frozen=True)
class Charge:
    customer: str
    cents: int


@dataclass(frozen=True)
class Receipt:
    customer: str
    charged: int


worker = Worker(["billing"], concurrency=4)


@worker.handler("charge")
async def charge(ctx: TaskContext, payload: Charge) -> Receipt:
    if payload.cents <= 0:
        raise NonRetryableError(f"nothing to charge for {payload.customer}")
    if ctx.attempt < 2:
        raise Retry(30, "card network busy")
    return Receipt(payload.customer, payload.cents)


async def test_a_typed_handler_gets_its_dataclass_and_its_result_is_encoded() -> None:
    outcome = await run_task(worker, "charge", Charge("c-1", 500), attempt=2)
    assert outcome.succeeded and outcome.value(Receipt) == Receipt("c-1", 500)
    assert outcome.output == b'{"customer":"c-1","charged":500}'


async def test_the_harness_reports_a_requested_retry_and_a_permanent_failure() -> None:
    retry = await run_task(worker, "charge", Charge("c-1", 500), attempt=1)
    assert (retry.kind, retry.retry_after_s, retry.error_message) == (
        "retry", 30.0, "card network busy",
    )  # fmt: skip
    refused = await run_task(worker, "charge", Charge("c-1", 0), attempt=2)
    assert refused.failed_permanently and refused.error_type == "NonRetryableError"


async def test_a_payload_that_does_not_validate_fails_permanently_naming_the_field() -> None:
    outcome = await run_task(worker, "charge", {"customer": "c-1", "cents": "lots"})
    assert outcome.failed_permanently and outcome.error_type == "InvalidPayload"
    assert outcome.error_message == (
        "handler 'charge': payload.cents: expected int, got str 'lots'"
    )
    assert outcome.traceback == ""  # the SDK refused it: no handler code to show


def test_a_bytes_handler_and_a_plain_function_keep_working_from_sync_code() -> None:
    def echo(ctx: TaskContext, payload: bytes) -> bytes:
        return payload[::-1]

    assert run_task_sync(echo, payload=b"abc").output == b"cba"
    unknown = run_task_sync(worker, "refund")
    assert unknown.failed_permanently and unknown.error_type == "UnknownHandler"


async def test_an_async_handler_past_its_timeout_is_stopped_and_retried() -> None:
    stopped = asyncio.Event()

    async def hangs(ctx: TaskContext, payload: bytes) -> None:
        try:
            await asyncio.sleep(60)
        finally:
            stopped.set()

    began = time.monotonic()
    outcome = await run_task(hangs, options=HandlerOptions(timeout_s=0.2))
    assert time.monotonic() - began < 5 and stopped.is_set()
    assert outcome.kind == "failed" and outcome.error_type == "HandlerTimeout"
    assert outcome.error_message == "handler 'hangs' ran past its timeout of 0.2 s and was stopped"


async def test_a_thread_handler_past_its_timeout_is_told_through_its_context() -> None:
    saw_cancel = threading.Event()

    def polls(ctx: TaskContext, payload: bytes) -> None:
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        if ctx.cancelled:
            saw_cancel.set()

    outcome = await run_task(polls, options=HandlerOptions(timeout_s=0.2))
    assert outcome.error_type == "HandlerTimeout"
    assert await asyncio.to_thread(saw_cancel.wait, 10)


async def test_a_tasks_own_execution_timeout_replaces_the_handlers() -> None:
    async def sleeps(ctx: TaskContext, payload: bytes) -> None:
        await asyncio.sleep(60)

    outcome = await run_task(sleeps, options=HandlerOptions(timeout_s=30), execution_timeout_ms=100)
    assert outcome.error_message == "handler 'sleeps' ran past its timeout of 0.1 s and was stopped"


async def test_a_handlers_own_timeout_error_is_not_taken_for_its_timeout() -> None:
    async def own(ctx: TaskContext, payload: bytes) -> None:
        raise TimeoutError("upstream took too long")

    outcome = await run_task(own, options=HandlerOptions(timeout_s=30))
    assert (outcome.error_type, outcome.error_message) == ("TimeoutError", "upstream took too long")


class Session(RunHooks):
    """Opens a resource per run for the handler, and closes it whatever happened."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def before(self, ctx: TaskContext) -> None:
        ctx.resources["db"] = f"session-{ctx.task_id}"
        self.log.append("open")

    async def after(self, ctx: TaskContext, output: bytes) -> None:
        self.log.append(f"after {output.decode()}")

    async def on_error(self, ctx: TaskContext, error: BaseException) -> None:
        self.log.append(f"error {type(error).__name__}")

    async def finally_(self, ctx: TaskContext) -> None:
        self.log.append(f"close {ctx.resources.pop('db')}")


async def test_middleware_wraps_every_run_in_order_and_hands_the_handler_a_resource() -> None:
    log: list[str] = []

    async def outer(call: Any, call_next: Any) -> bytes:
        log.append("outer in")
        try:
            return bytes(await call_next(call))
        finally:
            log.append("outer out")

    w = Worker(["q"], middleware=[outer, Session(log)])

    @w.handler("use")
    async def use(ctx: TaskContext, payload: str) -> str:
        if payload == "boom":
            raise ValueError(payload)
        return f"{ctx.resources['db']}:{payload}"

    ok = await run_task(w, "use", "hi", task_id="t1")
    assert ok.output == b"session-t1:hi"
    assert log == ["outer in", "open", "after session-t1:hi", "close session-t1", "outer out"]
    log.clear()
    failed = await run_task(w, "use", "boom", task_id="t2")
    assert failed.error_type == "ValueError"
    assert log == ["outer in", "open", "error ValueError", "close session-t2", "outer out"]


def test_a_handler_that_cannot_take_a_payload_or_whose_type_is_unknown_is_refused() -> None:
    w = Worker(["q"])
    with pytest.raises(ValueError, match="must take \\(ctx, payload\\)"):
        w.register("one", lambda ctx: None)

    def unresolvable(ctx: TaskContext, payload: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ValueError, match="cannot read its payload type"):
        w.register("two", unresolvable)
    with pytest.raises(ValueError, match="concurrency must be at least one"):
        w.handler("three", concurrency=0)


async def test_per_handler_and_per_label_concurrency_hold_only_their_own_runs() -> None:
    spec = handler_spec(
        "sync", _noop, HandlerOptions(concurrency=3, concurrency_per_label={"customer": 1})
    )
    gates, running, most = HandlerGates(), {"a": 0, "b": 0, "all": 0}, {"a": 0, "all": 0}

    async def one(customer: str) -> None:
        async with gates.admit(spec, {"customer": customer}):
            running[customer] += 1
            running["all"] += 1
            most["a"] = max(most["a"], running["a"])
            most["all"] = max(most["all"], running["all"])
            await asyncio.sleep(0.01)
            running[customer] -= 1
            running["all"] -= 1

    await asyncio.gather(*(one(c) for c in "aaaaabbbbb"))
    assert most == {"a": 1, "all": 2}  # one per customer, so two at once at most
    assert gates.holding() == 0  # per-label places are dropped once unused


async def test_a_rate_spaces_starts_evenly_by_the_injected_clock() -> None:
    now = [100.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(round(seconds, 6))
        now[0] += seconds

    gates = HandlerGates(clock=lambda: now[0], sleep=sleep)
    spec = handler_spec("mail", _noop, HandlerOptions(rate_per_s=4))
    for _ in range(4):
        async with gates.admit(spec, {}):
            pass
    assert slept == [0.25, 0.25, 0.25]


async def _noop(ctx: TaskContext, payload: bytes) -> None:
    return None
