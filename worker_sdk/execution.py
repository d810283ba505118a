"""One call of a handler: the ``TaskContext`` it is given, where it runs (an async handler on
the event loop, a plain function in the worker's thread pool), and how its outcome is written
into the run's ``RunResult`` (kind, output, error). The Worker decides whether to call at all
and reports the result."""

from __future__ import annotations

import asyncio
import concurrent.futures.thread
import contextvars
import functools
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from tikk.errors import InvalidArgument
from tikk.text_rules import check_name
from tikk.v1 import worker_pb2
from worker_sdk.context import NonRetryableError, Retry, TaskContext
from worker_sdk.queues.consumer import Message

log = logging.getLogger("tikk.worker")

Handler = (
    Callable[[TaskContext, bytes], Awaitable[bytes | None]]
    | Callable[[TaskContext, bytes], bytes | None]
)
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
# Where the frames that call a handler are: left out of its traceback.
_CALLER_FILES = frozenset({__file__, concurrent.futures.thread.__file__})
# A worker id: the server's Limits.max_worker_id_length.
_WORKER_ID_MOST = 128
# Characters kept free for the mark of a cut text, however long the text was.
_MARK_ROOM = 48


async def call_handler(
    fn: Handler, ctx: TaskContext, result: worker_pb2.RunResult, pool: ThreadPoolExecutor
) -> None:
    """Run ``fn`` on the delivery's payload and record its outcome in ``result``: its output,
    or the failure a ``Retry``, a ``NonRetryableError`` or any other exception means."""
    try:
        if inspect.iscoroutinefunction(fn):
            output = await fn(ctx, result.delivery.payload)
        else:
            # In the caller's context, so the run span is current in the handler's thread.
            run = contextvars.copy_context().run
            call = functools.partial(run, fn, ctx, result.delivery.payload)
            output = await asyncio.get_running_loop().run_in_executor(pool, call)
        if output is not None and not isinstance(output, bytes):
            raise TypeError(f"handler returned {type(output).__name__}, expected bytes|None")
        if output is not None and len(output) > _OUTPUT_LIMIT:
            raise ValueError(
                f"handler returned {len(output):,} bytes of output; a result holds at most "
                f"{_OUTPUT_LIMIT:,}"
            )
        result.kind = worker_pb2.RESULT_KIND_SUCCEEDED
        result.output = output or b""
    except Retry as exc:
        set_failure(result, worker_pb2.RESULT_KIND_RETRY, "Retry", str(exc))
        result.retry_after.FromMilliseconds(int(exc.after_seconds * 1000))
    except NonRetryableError as exc:
        kind = worker_pb2.RESULT_KIND_FAILED_PERMANENTLY
        set_failure(result, kind, type(exc).__name__, str(exc), _trace(exc))
    except Exception as exc:
        trace = _trace(exc)
        log.debug("handler %s failed: %s", ctx.handler, trace)
        set_failure(result, worker_pb2.RESULT_KIND_FAILED, type(exc).__name__, str(exc), trace)


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
