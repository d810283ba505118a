"""The Python client of tikk: typed methods over one gRPC channel, blocking (``Client``) or
asyncio (``AsyncClient``)::

    from datetime import UTC, datetime, timedelta
    from tikk.client import Client, TaskSpec

    with Client("127.0.0.1:7070", namespace="billing") as tikk:  # transport=Transport(...)
        tikk.create_task(TaskSpec("email", "send_welcome", b"{}", delay=timedelta(minutes=5)))
        for result in tikk.import_tasks(TaskSpec("email", "remind", task_id=f"r-{n}",
                                                 run_at=datetime(2030, 1, 1, tzinfo=UTC))
                                        for n in range(1_000_000)):
            ...

Arguments are Python values (``specs``); single objects come back as their tikk.v1 messages
(``Task``, ``Run``, ``Schedule``), composite answers as small dataclasses (``results``), and
failures as the ``errors`` tree. A client reaches one server or several, calls balanced over
them (``server_list``: ``Client("10.0.0.1:7070,10.0.0.2:7070")``); a call that is safe to
repeat is repeated after UNAVAILABLE, on another server when there are several (``retries``:
``retry=CallRetries(...)``, ``retry=None`` for never). Listings (``listings``) walk every page
lazily, or fetch one ``Page`` at a time::

    first = tikk.list_tasks("email", page_size=50).page()
    more = tikk.list_tasks("email", page_size=50).page(first.next_page_token)
"""

from tikk.client.async_client import AsyncClient
from tikk.client.errors import (
    AlreadyExistsError,
    ClientError,
    ConflictError,
    DeadlineExceededError,
    FailedPreconditionError,
    ImportInterrupted,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from tikk.client.listings import AsyncListing, Listing
from tikk.client.results import Backfilled, ImportResult, Page, TaskCreated
from tikk.client.retries import CallRetries
from tikk.client.server_list import ServerList
from tikk.client.specs import (
    Recurrence,
    RetryOptions,
    ScheduleDefinition,
    TaskSelection,
    TaskSpec,
)
from tikk.client.sync_client import Client
from tikk.client.transport import Transport, TransportError

__all__ = [
    "AlreadyExistsError",
    "AsyncClient",
    "AsyncListing",
    "Backfilled",
    "CallRetries",
    "Client",
    "ClientError",
    "ConflictError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "ImportInterrupted",
    "ImportResult",
    "InvalidArgumentError",
    "Listing",
    "NotFoundError",
    "Page",
    "PermissionDeniedError",
    "Recurrence",
    "ResourceExhaustedError",
    "RetryOptions",
    "ScheduleDefinition",
    "ServerList",
    "TaskCreated",
    "TaskSelection",
    "TaskSpec",
    "Transport",
    "TransportError",
    "UnauthenticatedError",
    "UnavailableError",
]
