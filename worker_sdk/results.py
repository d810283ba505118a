"""Streaming run results to the server over one long-lived ``ReportResultBatches`` call
(``ReportResults``, one result per message, with a server that has no batches).

Each result waits for its acknowledgement. Results reported while the stream is busy writing
wait in an outbox and are written together when it is free again, so that a burst costs one
wake-up, not one per result. Whatever ends a call (the server closing it, a broken connection,
any error of the reader), the stream waits a short backoff (from 50 ms, doubling to a
second), opens a new call and sends every unacknowledged result again: the server records a run
once however often it arrives (results carry a ``run_id``). A new call waits for a server that
is away (gRPC's wait-for-ready), so it opens as soon as the channel reaches the server again.
A worker given several servers (``tikk.client.server_list``) has its new call go to another
one at once: round robin skips a server whose connection was lost, and the channel's pings
close the connection of one that hangs. Whichever server a result reaches first, again or
for the first time, records it once, and the result is acknowledged (and its message
committed) once, by the ack that settles its wait.
Nothing is written to a call before it opened or after it ended (what ended it is its
status). A loss is logged once (a warning) and the stream's return once (info), however many
attempts fail in between. Only ``close`` ends the stream.

``waiting_s`` says how long results have been waiting while the server acknowledged nothing,
so that a worker that cannot report can stop taking work (see ``worker_sdk.worker``);
``connected`` whether a call is open now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from tikk.v1 import worker_pb2

log = logging.getLogger("tikk.worker")
# How long a new result call may take to open (waiting for the server, if it is away) before
# it counts as lost and the stream opens another.
_OPEN_TIMEOUT_S = 10.0
# Results per batch message: a burst in few messages, each well under gRPC's size limit.
_PER_MESSAGE = 256
# How long a result waits for others to share its batch message. Results that come one at a
# time (runs started at their due millisecond rather than fetched together) otherwise went one
# per message, and each message costs the worker and the server far more than a result in it.
# It delays an acknowledgement, and so a commit, never a start.
LINGER_S = 0.005
# The delay before a new result call when one ended: small, since the call itself waits for
# a server that is away, doubling while calls keep ending (a server refusing them).
_RECONNECT_FIRST_S = 0.05
_RECONNECT_CAP_S = 1.0
_CLOSED = "the server closed the result stream"


class _StreamEnded(Exception):
    pass


class Backoff:
    """Delays between attempts: ``initial_s``, then doubling up to ``cap_s``. ``reset`` after a
    success, so the next failure is retried quickly again. The cap is small because the thing
    waited for (a restarted server) is usually back within seconds."""

    def __init__(self, initial_s: float = 0.2, cap_s: float = 2.0) -> None:
        if not 0 < initial_s <= cap_s:
            raise ValueError("backoff needs 0 < initial_s <= cap_s")
        self._initial_s = initial_s
        self._cap_s = cap_s
        self._next_s = initial_s

    def next(self) -> float:
        """The delay before the next attempt (and the one after grows)."""
        delay = self._next_s
        self._next_s = min(self._cap_s, delay * 2)
        return delay

    def reset(self) -> None:
        self._next_s = self._initial_s


@dataclass
class _Waiting:
    """A result sent (or to be sent) and not yet acknowledged."""

    result: worker_pb2.RunResult
    future: asyncio.Future[worker_pb2.ResultAck]
    since: float


class ResultStream:
    """One ``ReportResults`` call at a time, reopened whenever it ends.

    ``clock`` (monotonic seconds) times how long results wait and how long the stream was
    lost; ``backoff`` spaces reconnects.
    """

    def __init__(
        self,
        stub: Any,
        *,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stub = stub
        self._backoff = backoff or Backoff(_RECONNECT_FIRST_S, _RECONNECT_CAP_S)
        self._clock = clock
        self._pending: dict[str, _Waiting] = {}
        self._outbox: list[worker_pb2.RunResult] = []  # reported, not yet written
        self._queued = asyncio.Event()  # set when the outbox is not empty
        self._task: asyncio.Task[None] | None = None
        self._last_ack = clock()
        self._batched = True  # until a server says it has no ReportResultBatches
        self._lost_at: float | None = None  # when the stream was lost, until a call opens
        self._call_open = False  # a call is open now: opened, and not yet ended

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tikk-result-stream")

    async def report(self, result: worker_pb2.RunResult) -> worker_pb2.ResultAck:
        """Send ``result`` and wait for the server's acknowledgement of it."""
        future: asyncio.Future[worker_pb2.ResultAck] = asyncio.get_running_loop().create_future()
        self._pending[result.run_id] = _Waiting(result, future, self._clock())
        self._outbox.append(result)
        self._queued.set()
        return await future

    def connected(self) -> bool:
        """Whether a result call to a server is open now (what a worker's readiness asks)."""
        return self._call_open

    def waiting_s(self) -> float:
        """How long results have been waiting with no acknowledgement (of any result) arriving;
        0 when none waits. Counted from the later of the oldest wait and the last
        acknowledgement: a slow server that still acknowledges others is reachable, however
        long one result waits; a server that is gone lets this grow."""
        if not self._pending:
            return 0.0
        # The first in insertion order waits longest: entries are added as they are reported
        # and only ever removed (a refused result is reported again as a new entry).
        oldest = next(iter(self._pending.values())).since
        return max(0.0, self._clock() - max(oldest, self._last_ack))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for waiting in self._pending.values():
            if not waiting.future.done():
                waiting.future.cancel()

    async def _run(self) -> None:
        """Serve one call after another until cancelled: any failure ends only the call."""
        while True:
            method = self._stub.ReportResultBatches if self._batched else self._stub.ReportResults
            # Waiting for the channel, not failing at once while the server is away: the call
            # opens as soon as the channel reaches the server again (``_OPEN_TIMEOUT_S``).
            call = method(wait_for_ready=True)
            try:
                if not await self._open(call):
                    continue  # the server has no result batches: one result per message
                await self._serve(call)
            except asyncio.CancelledError:
                if _being_cancelled():
                    raise  # close(): the only way out
                self._lost("the call was cancelled")  # by gRPC, e.g. its channel went away
            except Exception as exc:  # whatever ended the call, the next one re-sends
                if self._batched and await _unimplemented(call):
                    self._unbatch()
                    continue
                self._lost(_describe(exc))
            finally:
                self._call_open = False
                call.cancel()
            await asyncio.sleep(self._backoff.next())

    async def _open(self, call: Any) -> bool:
        """Wait until ``call`` is open (``TimeoutError`` after ``_OPEN_TIMEOUT_S``); False if
        it was refused as a method the server does not have (the stream goes on with
        ``ReportResults``). A call that ended instead raises its status."""
        if not self._batched:
            await asyncio.wait_for(call.wait_for_connection(), _OPEN_TIMEOUT_S)
        elif not await _takes_batches(call):
            self._unbatch()
            return False
        if self._lost_at is not None:
            log.info(
                "result stream open again after %.1f s; sending %d result(s) again",
                self._clock() - self._lost_at,
                len(self._pending),
            )
            self._lost_at = None
        self._call_open = True
        return True

    def _unbatch(self) -> None:
        log.info("the server takes no result batches; one result per message")
        self._batched = False

    def _lost(self, why: str) -> None:
        """Say once per outage that the stream was lost: the attempts that fail until a call
        opens again are debug lines only."""
        if self._lost_at is not None:
            log.debug("result stream still lost (%s)", why)
            return
        self._lost_at = self._clock()
        log.warning(
            "result stream lost (%s); reconnecting, %d result(s) to send again",
            why,
            len(self._pending),
        )

    async def _serve(self, call: Any) -> None:
        self._outbox.clear()  # everything pending is re-sent first
        reader = asyncio.create_task(self._read(call))
        reader.add_done_callback(_seen)
        try:
            batch = [waiting.result for waiting in self._pending.values()]
            while True:
                await self._write(call, [r for r in batch if r.run_id in self._pending])
                batch = await self._next_batch(reader)
        finally:
            reader.cancel()

    async def _write(self, call: Any, results: list[worker_pb2.RunResult]) -> None:
        """Write ``results`` (those not acknowledged meanwhile): in batch messages, or one by
        one on a ``ReportResults`` call. A call that ended meanwhile (its end can arrive
        between two writes) raises its status instead: gRPC refuses a write to it."""
        messages: list[Any] = results
        if self._batched:
            messages = [
                worker_pb2.RunResultBatch(results=results[first : first + _PER_MESSAGE])
                for first in range(0, len(results), _PER_MESSAGE)
            ]
        for message in messages:
            if call.done():
                raise await _ended(call)
            try:
                await call.write(message)
            except asyncio.InvalidStateError:
                if not call.done():
                    raise
                # An intercepted call (a transport with a token) ended during the write.
                raise await _ended(call) from None

    async def _next_batch(self, reader: asyncio.Task[None]) -> list[worker_pb2.RunResult]:
        """Everything reported since the last batch, waiting for one result if there is none
        and then ``LINGER_S`` for others (unless a message's worth is there): a burst is
        written in one go rather than one wake-up per result. Raises what ended the call if
        ``reader`` finished (a result taken then is still pending and goes out on the next
        call)."""
        if not self._outbox:
            self._queued.clear()
            queued = asyncio.ensure_future(self._queued.wait())
            try:
                await asyncio.wait({queued, reader}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                queued.cancel()
        if self._batched and not reader.done() and len(self._outbox) < _PER_MESSAGE:
            await asyncio.wait({reader}, timeout=LINGER_S)
        if reader.done():
            reader.result()
            raise _StreamEnded(_CLOSED)
        batch, self._outbox = self._outbox, []
        return batch

    async def _read(self, call: Any) -> None:
        async for answer in call:
            self._last_ack = self._clock()
            self._backoff.reset()
            for ack in answer.acks if self._batched else [answer]:
                waiting = self._pending.pop(ack.run_id, None)
                if waiting is not None and not waiting.future.done():
                    waiting.future.set_result(ack)


def _being_cancelled() -> bool:
    """Whether the running task was asked to stop (rather than gRPC raising CancelledError
    for a call it cancelled itself)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _takes_batches(call: Any) -> bool:
    """Whether the server serves ``ReportResultBatches``, asked before anything is written: it
    opens the call with its headers at once, while a server without the method ends it with
    UNIMPLEMENTED. (Once writes are under way, that status can reach the worker as another
    error, and the worker would never learn to fall back.) A call that ended with another
    status (the server is not there) raises it: nothing may be written to it."""
    await asyncio.wait_for(call.initial_metadata(), _OPEN_TIMEOUT_S)
    if not call.done():
        return True
    if await _unimplemented(call):
        return False
    raise await _ended(call)


async def _unimplemented(call: Any) -> bool:
    """Whether ``call`` (ended) was refused as a method the server does not have."""
    try:
        code = await asyncio.wait_for(call.code(), 1.0)
    except Exception:  # no status to be had: treat as any other loss
        return False
    return bool(code == grpc.StatusCode.UNIMPLEMENTED)


async def _ended(call: Any) -> _StreamEnded:
    """What ended ``call`` (done): its status, told as ``_describe`` tells an error's."""
    code = await call.code()
    if code == grpc.StatusCode.OK:
        return _StreamEnded(_CLOSED)
    return _StreamEnded(f"{code.name}: {await call.details()}")


def _seen(reader: asyncio.Task[None]) -> None:
    """Take what ended ``reader``: the end of its call is handled where it surfaces first (a
    write or the wait for the next batch), and asyncio logs an error nobody took."""
    if not reader.cancelled():
        reader.exception()


def _describe(exc: Exception) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    if isinstance(exc, _StreamEnded):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
