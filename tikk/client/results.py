"""Composite answers of the client; single objects come back as their tikk.v1 messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import grpc

from tikk.v1 import tasks_pb2

T = TypeVar("T")


@dataclass(frozen=True)
class TaskCreated:
    """The stored task, and whether this call created it (False: an identical task with
    this id already existed)."""

    task: tasks_pb2.Task
    created: bool


@dataclass(frozen=True)
class Backfilled:
    """Occurrences of a backfilled range: newly created, and already there (not created
    twice); of a dry run, those it would create (``occurrences``, each with its times)."""

    created: int
    existing: int
    occurrences: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class ImportResult:
    """What became of one item of an import, by its position in the input (``index``).

    ``code`` is OK when the task was accepted; ``created`` is False when it already existed
    (an item sent again). A refused item has the status and the server's reason, and its
    ``task_id`` when the item had one.
    """

    index: int
    task_id: str
    created: bool
    code: grpc.StatusCode
    message: str

    @property
    def ok(self) -> bool:
        return self.code is grpc.StatusCode.OK


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing: its ``items`` in the server's order, the ``next_page_token``
    that fetches the page after it (empty: this is the last), and the server's whole answer
    as ``response`` (e.g. a ``ListTasksResponse``), for a caller that shows or forwards it as
    it came."""

    items: list[T]
    next_page_token: str
    response: Any
