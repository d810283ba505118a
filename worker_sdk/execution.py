"""One run of a handler: the ``TaskContext`` it is given, the last link of the middleware
chain (decode the payload, call the handler within its timeout, encode what it returned; an
async handler runs on the event loop, a plain function in the worker's thread pool), and how
the chain's outcome is written into the run's ``RunResult`` (kind, output, error). The Worker
decides whether to call at all and reports the result."""

from __future__ import annotations

import asyncio
import concurrent.futures.thread
import contextvars
import functools
import logging
import os
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from tikk.errors import InvalidArgument
from tikk.payload_codec import PayloadInvalid, decode_payload, encode_payload
from tikk.text_rules import check_name
from tikk.v1 import worker_pb2
from worker_sdk.context import (
    CANCEL_REQUESTED,
    SHUTTING_DOWN,
    TIMED_OUT,
    HandlerTimeout,
    NonRetryableError,
    Retry,
    RunCancelled,
    TaskContext,
    run_interrupted,
)
from worker_sdk.handlers import HandlerSpec
from worker_sdk.middleware import Middleware, Next, RunCall, chain
from worker_sdk.queues.consumer import Message

log = logging.getLogger("tikk.worker")

# What a result may carry, within the server's caps (``tikk.settings.Limits``: 256 characters
# of error type, 8,192 of error message, 64 KiB of output), which refuse a result over one.
# A failure must still be reported, so its error is cut to fit here, saying so; an output
# cannot be cut without changing it, so a run whose output is over the cap fails instead.
_ERROR_TYPE_LIMIT = 256
_ERROR_MESSAGE_LIMIT = 4096
# A traceback keeps its end (where the exception was raised) within the server's
# max_traceback_length of 16,384.
_TRACEBACK_LIMIT = 8192
_OUTPUT_LIMIT = 64 * 1024
# Where the frames that call a handler are (this module, the chain, the telemetry link, the
# event loop's awaits, the thread pool): left out of the start of its traceback.
_CALLER_FILES = frozenset(
    {
        __file__,
        os.path.join(os.path.dirname(__file__), "middleware.py"),
        os.path.join(os.path.dirname(__file__), "telemetry.py"),
        asyncio.futures.__file__,
        asyncio.tasks.__file__,
        asyncio.timeouts.__file__,
        concurrent.futures.thread.__file__,
    }
)
# A worker id: the server's Limits.max_worker_id_length.
_WORKER_ID_MOST = 128
# Characters kept free for the mark of a cut text, however long the text was.
_MARK_ROOM = 48


class PoisonMessage(NonRetryableError):
    """The message was handed out too often without a recorded result: it is not run again."""


class UnknownHandler(NonRetryableError):
    """The delivery names a handler this worker does not have."""


class InvalidPayload(NonRetryableError):
    """The payload does not decode into the type the handler declares."""


# Failures the SDK itself decides: their traceback would only show the SDK.
_NO_TRACE = (PoisonMessage, UnknownHandler, InvalidPayload)


def handler_link(spec: HandlerSpec, pool: ThreadPoolExecutor) -> Next:
    """The last link of the chain for ``spec``: decode, call within the timeout, encode."""

    async def run(call: RunCall) -> bytes:
        try:
            payload = decode_payload(call.payload, spec.payload_type)
        except PayloadInvalid as exc:
            raise InvalidPayload(f"handler {spec.name!r}: {exc}") from None
        output = await _call(spec, call.ctx, payload, pool, _timeout_s(spec, call.delivery))
        return _encoded(output)

    return run


def refusal_link(error: NonRetryableError) -> Next:
    """The last link of a run that reaches no handler: it fails with ``error``."""

    async def run(call: RunCall) -> bytes:
        raise error

    return run


async def call_handler(
    middleware: Sequence[Middleware], last: Next, call: RunCall, result: worker_pb2.RunResult
) -> None:
    """Run ``call`` down the chain and record its outcome in ``result``: its output, or the
    failure a ``Retry``, a ``NonRetryableError`` or any other exception means."""
    try:
        output = await chain(middleware, last)(call)
        result.kind = worker_pb2.RESULT_KIND_SUCCEEDED
        result.output = output
    except RunCancelled as exc:
        # Recorded as cancelled only when its task was; a handler that gave up by itself
        # failed (the server would refuse a cancelled run of a task not cancelled).
        cancelled = call.ctx.cancel_reason == CANCEL_REQUESTED
        kind = worker_pb2.RESULT_KIND_CANCELLED if cancelled else worker_pb2.RESULT_KIND_FAILED
        set_failure(result, kind, type(exc).__name__, str(exc), "" if cancelled else _trace(exc))
    except Retry as exc:
        set_failure(result, worker_pb2.RESULT_KIND_RETRY, "Retry", str(exc))
        result.retry_after.FromMilliseconds(int(exc.after_seconds * 1000))
    except NonRetryableError as exc:
        kind = worker_pb2.RESULT_KIND_FAILED_PERMANENTLY
        trace = "" if isinstance(exc, _NO_TRACE) else _trace(exc)
        set_failure(result, kind, type(exc).__name__, str(exc), trace)
    except Exception as exc:
        trace = _trace(exc)
        log.debug("handler %s failed: %s", call.ctx.handler, trace)
        set_failure(result, worker_pb2.RESULT_KIND_FAILED, type(exc).__name__, str(exc), trace)


def _timeout_s(spec: HandlerSpec, delivery: worker_pb2.Delivery) -> float | None:
    """The task's own execution timeout if it has one, else the handler's."""
    if delivery.HasField("execution_timeout"):
        return float(delivery.execution_timeout.ToMilliseconds()) / 1000
    return spec.options.timeout_s


async def _call(
    spec: HandlerSpec, ctx: TaskContext, payload: Any, pool: ThreadPoolExecutor,
    timeout_s: float | None,
) -> Any:  # fmt: skip
    """``spec``'s function on ``payload``, stopped after ``timeout_s`` or when its task is
    cancelled (a plain function cannot be stopped: it is told through ``ctx.cancelled``, and
    no longer waited for after its timeout)."""
    if spec.is_async:
        work: asyncio.Future[Any] = asyncio.ensure_future(spec.fn(ctx, payload))
        ctx.control.attach(work)  # a cancel of its task cancels the coroutine
    else:
        # In the caller's context, so the run span is current in the handler's thread.
        run = contextvars.copy_context().run
        call = functools.partial(run, spec.fn, ctx, payload)
        work = asyncio.get_running_loop().run_in_executor(pool, call)
    limit = asyncio.timeout(timeout_s)
    try:
        async with limit:
            return await work
    except TimeoutError:
        if not limit.expired():  # the handler's own TimeoutError
            raise
        ctx.control.stop(TIMED_OUT)
        raise HandlerTimeout(
            f"handler {spec.name!r} ran past its timeout of {timeout_s:g} s and was stopped"
        ) from None
    except asyncio.CancelledError:
        if run_interrupted():
            ctx.control.stop(SHUTTING_DOWN)  # a plain function learns it through ctx
            raise
        if ctx.cancel_reason == CANCEL_REQUESTED:
            raise RunCancelled("the task was cancelled while the run went on") from None
        raise


def _encoded(output: Any) -> bytes:
    """What the handler returned, as output bytes within the server's cap."""
    try:
        data = encode_payload(output)
    except TypeError as exc:
        raise TypeError(f"handler returned what cannot be encoded: {exc}") from None
    if len(data) > _OUTPUT_LIMIT:
        raise ValueError(
            f"handler returned {len(data):,} bytes of output; a result holds at most "
            f"{_OUTPUT_LIMIT:,}"
        )
    return data


def task_context(message: Message, run_id: str, worker_id: str) -> TaskContext:
    """What the handler is told of the run of ``message``."""
    d = message.delivery
    return TaskContext(
        namespace=d.namespace,
        task_id=d.task_id,
        queue=d.queue,
        handler=d.handler,
        run_id=run_id,
        attempt=d.attempt,
        max_attempts=d.max_attempts,
        scheduled_time=_dt(d.scheduled_time),
        due_time=_dt(d.due_time),
        fired_time=_dt(d.fired_time),
        idempotency_key=d.idempotency_key,
        labels=dict(d.labels),
        worker_id=worker_id,
        delivery_count=message.delivery_count,
    )


def set_failure(
    result: worker_pb2.RunResult, kind: int, error_type: str, message: str, trace: str = ""
) -> None:
    """Record a failed run of ``kind``; its type and message are cut to fit (``_cut``), its
    traceback to its end (``_cut_head``)."""
    result.kind = kind  # type: ignore[assignment]
    result.error_type = _cut(error_type, _ERROR_TYPE_LIMIT)
    result.error_message = _cut(message, _ERROR_MESSAGE_LIMIT)
    result.traceback = _cut_head(trace, _TRACEBACK_LIMIT)


def _trace(exc: BaseException) -> str:
    """``exc``'s traceback from the handler down, with its causes: the frames of
    ``call_handler`` and of the thread pool that called a plain function are left out, as
    they are the same in every traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _CALLER_FILES:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _cut(text: str, most: int) -> str:
    """``text`` if it has at most ``most`` characters, else its start and a mark saying how
    much was cut, at most ``most`` characters in all."""
    if len(text) <= most:
        return text
    kept = most - _MARK_ROOM
    return f"{text[:kept]}…({len(text) - kept:,} more characters cut)"


def _cut_head(text: str, most: int) -> str:
    """``text`` if it has at most ``most`` characters, else a mark saying how much was cut
    and its end, at most ``most`` characters in all."""
    if len(text) <= most:
        return text
    kept = most - _MARK_ROOM
    return f"({len(text) - kept:,} characters cut)…{text[-kept:]}"


def _dt(ts: Any) -> datetime:
    return datetime.fromtimestamp(ts.ToMilliseconds() / 1000, tz=UTC)


def checked_worker_id(worker_id: str) -> str:
    """The server refuses every result of a worker whose id is not a short name, and the
    worker would report them again for ever: so such an id is refused here, at once."""
    most = _WORKER_ID_MOST
    if len(worker_id) > most:
        raise ValueError(f"worker_id is {len(worker_id):,} characters; at most {most} are allowed")
    try:
        return check_name(worker_id, "worker_id")
    except InvalidArgument as exc:
        raise ValueError(str(exc)) from None
