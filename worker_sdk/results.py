"""Streaming run results to the server over one long-lived ``ReportResults`` call.

Each result waits for its acknowledgement. If the stream breaks, it is reopened and every
unacknowledged result is sent again; the server records a run once however often it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc

from tikk.v1 import worker_pb2

log = logging.getLogger("tikk.worker")


class _StreamEnded(Exception):
    pass


class ResultStream:
    def __init__(self, stub: Any, *, reconnect_delay_s: float = 0.5) -> None:
        self._stub = stub
        self._reconnect_delay_s = reconnect_delay_s
        self._pending: dict[str, tuple[worker_pb2.RunResult, asyncio.Future[Any]]] = {}
        self._outbox: asyncio.Queue[worker_pb2.RunResult] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tikk-result-stream")

    async def report(self, result: worker_pb2.RunResult) -> worker_pb2.ResultAck:
        """Send ``result`` and wait for the server's acknowledgement of it."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[result.run_id] = (result, future)
        self._outbox.put_nowait(result)
        ack: worker_pb2.ResultAck = await future
        return ack

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _, future in self._pending.values():
            if not future.done():
                future.cancel()

    async def _run(self) -> None:
        while True:
            call = self._stub.ReportResults()
            try:
                await self._serve(call)
            except (grpc.aio.AioRpcError, _StreamEnded) as exc:
                log.warning("result stream lost, reconnecting: %s", exc)
            finally:
                call.cancel()
            await asyncio.sleep(self._reconnect_delay_s)

    async def _serve(self, call: Any) -> None:
        while not self._outbox.empty():  # everything pending is re-sent below
            self._outbox.get_nowait()
        reader = asyncio.create_task(self._read(call))
        try:
            for result, _ in list(self._pending.values()):
                await call.write(result)
            while True:
                getter = asyncio.create_task(self._outbox.get())
                done, _ = await asyncio.wait({getter, reader}, return_when="FIRST_COMPLETED")
                if getter not in done:
                    getter.cancel()
                    reader.result()
                    raise _StreamEnded("server closed the result stream")
                result = getter.result()
                if result.run_id in self._pending:
                    await call.write(result)
        finally:
            reader.cancel()

    async def _read(self, call: Any) -> None:
        async for ack in call:
            entry = self._pending.pop(ack.run_id, None)
            if entry is not None and not entry[1].done():
                entry[1].set_result(ack)
