"""Reporting one run to the server until it is settled: a start claim (an attempt with a start
timeout runs only once the server granted it) and the run's result (reported again until the
server records it, or refuses it for good)."""

from __future__ import annotations

import asyncio
import logging
import uuid

import grpc

from tikk.v1 import worker_pb2
from worker_sdk.queues.consumer import Message
from worker_sdk.results import ResultStream

log = logging.getLogger("tikk.worker")

# Answers that reporting again cannot change (google.rpc.Code numbers): the task is not
# running that attempt any more (also a start whose timeout ran out), or the delivery's token
# does not match it. The message is dropped, not reported forever.
FINAL_REFUSALS = {
    grpc.StatusCode.FAILED_PRECONDITION.value[0],
    grpc.StatusCode.PERMISSION_DENIED.value[0],
}
_OK = grpc.StatusCode.OK.value[0]
_AGAIN_S = 1.0  # before reporting again what the server could not record


async def report_until_settled(results: ResultStream, result: worker_pb2.RunResult) -> bool:
    """Report ``result`` until the server records it (True) or refuses it for good (False:
    the message is dropped)."""
    while True:
        ack = await results.report(result)
        if ack.code == _OK:
            return True
        if ack.code in FINAL_REFUSALS:
            d = result.delivery
            log.warning("result of task %s attempt %d refused for good, message dropped: %s",
                        d.task_id, d.attempt, ack.message)  # fmt: skip
            return False
        log.warning("server refused result of %s (%s), retrying", result.run_id, ack.message)
        await asyncio.sleep(_AGAIN_S)


async def may_start(results: ResultStream, message: Message, worker_id: str, now_ms: int) -> bool:
    """An attempt with a start timeout runs only once the server granted its start (the
    timeout may have run out, and then it was dead-lettered instead); others always."""
    d = message.delivery
    if not d.HasField("start_timeout"):
        return True
    claim = worker_pb2.RunResult(
        run_id=uuid.uuid4().hex, delivery=d, kind=worker_pb2.RESULT_KIND_STARTED,
        worker_id=worker_id,
    )  # fmt: skip
    claim.start_time.FromMilliseconds(now_ms)
    while True:
        ack = await results.report(claim)
        if ack.code == _OK:
            return True
        if ack.code in FINAL_REFUSALS:
            log.warning("start of task %s attempt %d refused, message dropped: %s",
                        d.task_id, d.attempt, ack.message)  # fmt: skip
            return False
        log.warning("server could not decide the start of %s (%s), asking again",
                    d.task_id, ack.message)  # fmt: skip
        await asyncio.sleep(_AGAIN_S)
