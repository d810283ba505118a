"""The tikk worker SDK: register handlers on a ``Worker`` and run it against a tikk server.

::

    from worker_sdk import Worker, TaskContext

    worker = Worker(queues=["email"])

    @worker.handler("send_welcome")
    async def send_welcome(ctx: TaskContext, payload: bytes) -> bytes | None: ...

Depends on no server module: of ``tikk`` only the generated ``tikk.v1`` stubs, the errors,
the clock, the client transport, the URL parser, ``tikk.queue_contract`` (what the worker and
the dispatcher must agree on about the ready queue) and ``tikk.drivers.kafka`` (the Kafka
login and topic creation both sides share); ``tests/unit/test_queue_contract.py`` checks it.
"""

from worker_sdk.context import NonRetryableError, Retry, TaskContext
from worker_sdk.worker import Worker

__all__ = ["NonRetryableError", "Retry", "TaskContext", "Worker"]
