"""The client side of ``ImportTasks``: items cut into batches, at most ``window`` batches
unanswered, and each answer turned into one result per item, in input order.

The input is read only as fast as the server answers (a batch is built once a slot is free),
so an import of ten million items from a generator holds at most ``window`` batches. The
server answers batches in the order they were sent, so the unanswered ones wait in a FIFO
and ``next_index`` (the first item without a result) is where a broken import resumes.

A failure of the caller's input (its iterator raised, or an item is not a task) ends the
stream cleanly after the items read before it; the feed keeps the error, and the import
raises it once those items are answered.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

import grpc

from tikk.client.errors import ClientError, ImportInterrupted
from tikk.client.results import ImportResult
from tikk.client.specs import TaskSpec
from tikk.client.wire import task_request
from tikk.v1 import tasks_pb2

ImportItem = TaskSpec | tasks_pb2.CreateTaskRequest
_STATUS = {code.value[0]: code for code in grpc.StatusCode}


# Batches in flight by default: the server works on up to this many of a stream at once.
IMPORT_WINDOW = 4


def check_import_options(batch_size: int, window: int) -> None:
    # Over the server's batch limit (5,000 by default) every item of a batch comes back
    # RESOURCE_EXHAUSTED, so that limit is left for the server to state.
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if window < 1:
        raise ValueError(f"window must be at least 1, not {window}")


class ImportLedger:
    """The batches of one stream sent and not yet answered, oldest first, and the count of
    items answered. ``batch`` may run on another thread than ``results`` (the blocking
    client's gRPC feeder): they share only the FIFO, whose append and popleft are atomic."""

    def __init__(self, first_index: int) -> None:
        self._sent = first_index
        self._first = first_index
        self._unanswered: deque[tuple[int, list[str]]] = deque()
        self.answered = 0

    @property
    def next_index(self) -> int:
        """The index of the first item that has no result yet."""
        return self._first + self.answered

    def batch(self, tasks: list[tasks_pb2.CreateTaskRequest]) -> tasks_pb2.ImportTasksRequest:
        """The next batch to send; its id is the index of its first item."""
        first, self._sent = self._sent, self._sent + len(tasks)
        self._unanswered.append((first, [t.task_id for t in tasks]))
        return tasks_pb2.ImportTasksRequest(batch_id=first, tasks=tasks)

    def results(self, answer: tasks_pb2.ImportTasksResponse) -> list[ImportResult]:
        """One result per item of the oldest unanswered batch, which ``answer`` answers."""
        first, ids = self._unanswered.popleft()
        if answer.batch_id != first or (answer.code == 0 and len(answer.results) != len(ids)):
            raise ClientError(grpc.StatusCode.INTERNAL, (
                f"the server answered batch {answer.batch_id} with {len(answer.results)} "
                f"results where batch {first} of {len(ids)} items was due"
            ))  # fmt: skip
        self.answered += len(ids)
        if answer.code != 0:
            code = _STATUS.get(answer.code, grpc.StatusCode.UNKNOWN)
            return [ImportResult(first + i, tid, False, code, answer.message)
                    for i, tid in enumerate(ids)]  # fmt: skip
        return [
            ImportResult(first + r.index, r.task_id, r.created,
                         _STATUS.get(r.code, grpc.StatusCode.UNKNOWN), r.message)
            for r in answer.results
        ]  # fmt: skip

    def interrupted(self, cause: ClientError) -> ImportInterrupted:
        return ImportInterrupted(cause, self.answered, self.next_index)


class BlockingFeed:
    """The request stream of a blocking import. gRPC pulls ``requests()`` on a thread of its
    own; the caller's thread calls ``answered()`` per answer and ``stop()`` at the end."""

    def __init__(
        self, ledger: ImportLedger, items: Iterable[ImportItem], namespace: str, size: int,
        window: int,
    ) -> None:  # fmt: skip
        self._ledger, self._items, self._ns, self._size = ledger, iter(items), namespace, size
        self._slots = threading.Semaphore(window)
        self._stopped = threading.Event()
        self.input_error: Exception | None = None

    def requests(self) -> Iterator[tasks_pb2.ImportTasksRequest]:
        while True:
            self._slots.acquire()
            if self._stopped.is_set():
                return
            chunk = self._next_chunk()
            if chunk:
                yield self._ledger.batch(chunk)
            if len(chunk) < self._size or self.input_error is not None:
                return

    def _next_chunk(self) -> list[tasks_pb2.CreateTaskRequest]:
        chunk: list[tasks_pb2.CreateTaskRequest] = []
        try:
            for item in itertools.islice(self._items, self._size):
                chunk.append(task_request(item, self._ns))
        except Exception as exc:  # the caller's input: raised to the caller after the stream
            self.input_error = exc
        return chunk

    def answered(self) -> None:
        self._slots.release()

    def stop(self) -> None:
        """Let a feeder waiting for a slot end the stream (the import is over or broken)."""
        self._stopped.set()
        self._slots.release()


class AsyncFeed:
    """The request stream of an asyncio import, from an iterable or an async iterable."""

    def __init__(
        self, ledger: ImportLedger, items: Iterable[ImportItem] | AsyncIterable[ImportItem],
        namespace: str, size: int, window: int,
    ) -> None:  # fmt: skip
        self._ledger, self._ns, self._size = ledger, namespace, size
        self._items = aiter(items) if isinstance(items, AsyncIterable) else _lift(items)
        self._slots = asyncio.Semaphore(window)
        self._stopped = False
        self.input_error: Exception | None = None

    async def requests(self) -> AsyncIterator[tasks_pb2.ImportTasksRequest]:
        while True:
            await self._slots.acquire()
            if self._stopped:
                return
            chunk = await self._next_chunk()
            if chunk:
                yield self._ledger.batch(chunk)
            if len(chunk) < self._size or self.input_error is not None:
                return

    async def _next_chunk(self) -> list[tasks_pb2.CreateTaskRequest]:
        chunk: list[tasks_pb2.CreateTaskRequest] = []
        try:
            while len(chunk) < self._size:
                try:
                    item = await anext(self._items)
                except StopAsyncIteration:
                    break
                chunk.append(task_request(item, self._ns))
        except Exception as exc:  # the caller's input: raised to the caller after the stream
            self.input_error = exc
        return chunk

    def answered(self) -> None:
        self._slots.release()

    def stop(self) -> None:
        self._stopped = True
        self._slots.release()


async def _lift(items: Iterable[ImportItem]) -> AsyncIterator[ImportItem]:
    for item in items:
        yield item
