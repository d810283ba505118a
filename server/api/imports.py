"""Bulk import (``TaskService.ImportTasks``): each batch answered once it is durable, in order,
with a bounded number of batches in flight per stream.

The window is the backpressure: while it is full the server reads nothing more from the
stream, so gRPC's flow control holds a fast client back to the pace of the store instead of
the server buffering its input. A batch the server refuses as a whole (over the item limit, or
a store failure part-way) gets an answer with a status and no results: every item of it may
be sent again, and with client task ids that creates nothing twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from server.api.status import code_of, detail_of, numeric
from tikk.errors import ResourceExhausted, TikkError
from tikk.v1 import tasks_pb2

# Creates the tasks of a batch and writes their results (indexes from 0) into the answer.
CreateChunk = Callable[
    [Sequence[tasks_pb2.CreateTaskRequest], tasks_pb2.CreateTasksResponse], Awaitable[None]
]


async def import_batch(
    batch: tasks_pb2.ImportTasksRequest, max_items: int, create: CreateChunk
) -> tasks_pb2.ImportTasksResponse:
    """The answer to one batch: a result per task, or the reason the batch was refused."""
    answer = tasks_pb2.ImportTasksResponse(batch_id=batch.batch_id)
    if len(batch.tasks) > max_items:
        return _refused(answer, ResourceExhausted(
            f"an ImportTasks batch holds at most {max_items:,} tasks, this one "
            f"{len(batch.tasks):,}: split it"
        ))  # fmt: skip
    results = tasks_pb2.CreateTasksResponse()
    try:
        await create(batch.tasks, results)
    except ResourceExhausted as exc:  # over a quota: refused before anything was written
        return _refused(answer, exc)
    except TikkError as exc:
        return _refused(answer, exc, "the batch may be stored in part; send it again: ")
    answer.results.extend(results.results)
    answer.accepted, answer.rejected = results.accepted, results.rejected
    return answer


def _refused(
    answer: tasks_pb2.ImportTasksResponse, exc: TikkError, prefix: str = ""
) -> tasks_pb2.ImportTasksResponse:
    answer.code = numeric(code_of(exc))
    answer.message = prefix + detail_of(exc)
    return answer
