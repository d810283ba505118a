"""The bulk-action store: each stored ``tikk.bulk_actions.BulkAction``, with its progress.

Every write after the first is a compare-and-set on the action's ``version``: a server that
runs an action saves its progress only if nobody changed the action since it read it (a
stop, or a server that took over an action whose lease ran out), so two servers never both
go on with one action.

Backends: ``tikk.store.sqlite.bulk_actions``, ``tikk.store.cassandra.bulk_actions``. Every
method may raise ``BackendUnavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tikk.bulk_actions import BulkAction
from tikk.model import Page


class BulkActionStore(Protocol):
    """Bulk actions by namespace and id, in the task store's database."""

    async def create(self, action: BulkAction) -> tuple[BulkAction, bool]:
        """Store a new action (version 1), or return the one stored under its namespace and
        id already, with False (a request sent again starts nothing twice)."""
        ...

    async def get(self, namespace: str, action_id: str) -> BulkAction:
        """One action; raises ``NotFound``."""
        ...

    async def list(self, namespace: str, page_size: int, page_token: str) -> Page[BulkAction]:
        """The namespace's actions by id, last first (ids the server assigns sort by
        creation time). Raises ``InvalidArgument`` for a malformed token."""
        ...

    async def running(self, limit: int) -> Sequence[BulkAction]:
        """Up to ``limit`` actions of any namespace still RUNNING (to run or resume)."""
        ...

    async def replace(self, action: BulkAction) -> bool:
        """Write ``action`` if the stored one is at ``action.version - 1``; whether it was
        written (False: someone changed it first, or it is gone)."""
        ...

    async def start(self) -> None:
        """Open connections and files (nothing is opened by the constructor)."""
        ...

    async def close(self) -> None:
        """Release what ``start`` opened; idempotent."""
        ...
