"""The tikk worker SDK: register handlers on a ``Worker`` and run it against a tikk server.

::

    from dataclasses import dataclass
    from worker_sdk import Worker, TaskContext

    @dataclass
    class Welcome:
        email: str

    worker = Worker(queues=["email"])

    @worker.handler("send_welcome", timeout_s=30, rate_per_s=50)
    async def send_welcome(ctx: TaskContext, payload: Welcome) -> None: ...

Handlers (``worker_sdk.handlers``), middleware (``worker_sdk.middleware``), per-handler limits
(``worker_sdk.gates``), the test harness (``worker_sdk.testing``) and a pytest fixture of an
embedded tikk (``worker_sdk.pytest_plugin``).

Depends on no server module: of ``tikk`` only the generated ``tikk.v1`` stubs, the errors,
the clock, the client transport, the URL parser, the payload codec, ``tikk.queue_contract``
(what the worker and the dispatcher must agree on about the ready queue) and
``tikk.drivers.kafka`` (the Kafka login and topic creation both sides share);
``tests/unit/test_queue_contract.py`` checks it.
"""

from worker_sdk.context import (
    HandlerTimeout,
    NonRetryableError,
    Retry,
    RunCancelled,
    TaskContext,
)
from worker_sdk.handlers import HandlerOptions
from worker_sdk.middleware import Middleware, RunCall, RunHooks
from worker_sdk.worker import Worker

__all__ = [
    "HandlerOptions",
    "HandlerTimeout",
    "Middleware",
    "NonRetryableError",
    "Retry",
    "RunCall",
    "RunCancelled",
    "RunHooks",
    "TaskContext",
    "Worker",
]
