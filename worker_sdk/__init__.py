"""The tikk worker SDK: register handlers on a ``Worker`` and run it against a tikk server.

::

    from worker_sdk import Worker, TaskContext

    worker = Worker(queues=["email"])

    @worker.handler("send_welcome")
    async def send_welcome(ctx: TaskContext, payload: bytes) -> bytes | None: ...

Depends only on the generated ``tikk.v1`` stubs, ``tikk.errors`` and ``tikk.queue_contract``
(what the worker and the dispatcher must agree on about the ready queue).
"""

from worker_sdk.context import NonRetryableError, Retry, TaskContext
from worker_sdk.worker import Worker

__all__ = ["NonRetryableError", "Retry", "TaskContext", "Worker"]
