"""The benchmark's tasks and how they are loaded: through ``ImportTasks``, over a few
concurrent streams, counting acknowledged tasks so the ingest rate can be sampled each second.

``task_requests`` is also what the bare-driver ceiling (``devtools.ceiling``) turns into rows,
so tikk and the driver write the same tasks.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from tikk.client.transport import Transport
from tikk.timestamps import to_timestamp
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

BATCH = 1000
STREAMS = 4


@dataclass(frozen=True)
class Spread:
    """Tasks due from ``first_due_ms`` on, ``rate`` per second (``rate`` 0: all at once)."""

    first_due_ms: int
    rate: float

    def due_ms(self, index: int) -> int:
        return self.first_due_ms + (int(index * 1000 / self.rate) if self.rate else 0)


@dataclass(frozen=True)
class IngestResult:
    tasks: int
    seconds: float
    # (seconds since the start, tasks acknowledged in the second before it).
    series: tuple[tuple[float, float], ...]

    @property
    def per_s(self) -> float:
        return self.tasks / self.seconds if self.seconds else 0.0


class AckCounter:
    """Tasks acknowledged so far, added to by the stream threads, read by the sampler."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def add(self, n: int) -> None:
        with self._lock:
            self._count += n

    @property
    def count(self) -> int:
        with self._lock:
            return self._count


def task_requests(
    start: int, stop: int, spread: Spread, queue: str
) -> Iterator[tasks_pb2.CreateTaskRequest]:
    """Tasks ``start``..``stop`` of a load: server-assigned ids, a no-op handler."""
    for i in range(start, stop):
        yield tasks_pb2.CreateTaskRequest(
            queue=queue, handler="noop", run_at=to_timestamp(spread.due_ms(i))
        )


def _batches(
    start: int, stop: int, spread: Spread, queue: str
) -> Iterator[tasks_pb2.ImportTasksRequest]:
    for first in range(start, stop, BATCH):
        last = min(stop, first + BATCH)
        yield tasks_pb2.ImportTasksRequest(
            batch_id=first, tasks=list(task_requests(first, last, spread, queue))
        )


def _stream(
    address: str,
    span: range,
    spread: Spread,
    queue: str,
    acked: AckCounter,
    *,
    transport: Transport,
) -> BaseException | None:
    """One ``ImportTasks`` stream for the tasks in ``span``; the error that ended it, if any."""
    # A connection of its own per stream (gRPC shares one between channels to one address by
    # default), so a server of several processes on one port gets streams in each.
    options = [("grpc.use_local_subchannel_pool", 1)]
    with transport.channel(address, options) as channel:
        stub = tasks_pb2_grpc.TaskServiceStub(channel)
        try:
            for answer in stub.ImportTasks(
                _batches(span.start, span.stop, spread, queue), timeout=86_400
            ):
                if answer.code or answer.rejected:
                    return RuntimeError(f"batch {answer.batch_id} refused: {answer.message}")
                acked.add(answer.accepted)
        except grpc.RpcError as exc:
            return exc
    return None


def _spans(n: int, streams: int) -> list[range]:
    """``n`` tasks cut into ``streams`` contiguous ranges of near-equal size."""
    edges = [n * i // streams for i in range(streams + 1)]
    return [range(a, b) for a, b in itertools.pairwise(edges) if b > a]


def ingest(
    address: str, n: int, spread: Spread, queue: str, transport: Transport | None = None
) -> IngestResult:
    """Load ``n`` tasks over ``STREAMS`` concurrent streams (over ``transport``: TLS, a
    token; plaintext if None), sampling the acknowledged count every second. Raises
    ``RuntimeError`` if any batch was refused or a stream failed."""
    transport = transport or Transport()
    acked = AckCounter()
    errors: list[BaseException] = []

    def run(span: range) -> None:
        if (error := _stream(address, span, spread, queue, acked, transport=transport)) is not None:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(s,)) for s in _spans(n, STREAMS)]
    began = time.monotonic()
    for t in threads:
        t.start()
    series = _sample_until_done(threads, acked, began)
    seconds = time.monotonic() - began
    if errors:
        raise RuntimeError(f"ingest failed: {errors[0]}")
    return IngestResult(acked.count, seconds, tuple(series))


def _sample_until_done(
    threads: list[threading.Thread], acked: AckCounter, began: float
) -> list[tuple[float, float]]:
    series: list[tuple[float, float]] = []
    last_t, last_n = began, 0
    while any(t.is_alive() for t in threads):
        # Returns at the next whole second of the run, or sooner when every stream is done.
        tick = last_t + 1.0
        for t in threads:
            t.join(timeout=max(0.0, tick - time.monotonic()))
        now, count = time.monotonic(), acked.count
        if now > last_t:
            series.append((round(now - began, 3), (count - last_n) / (now - last_t)))
        last_t, last_n = now, count
    return series
