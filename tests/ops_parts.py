"""Parts of the operations layer (``server.ops``) that tests build around the store they test:
a quota gate on the embedded quota store with no quotas set."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from server.ops.quotas import QuotaGate
from tikk.clock import Clock
from tikk.settings import QuotaSettings
from tikk.store.sqlite.quotas import SqliteQuotaStore
from tikk.store.sqlite.schedules import SqliteScheduleStore


@contextlib.asynccontextmanager
async def quota_gate(db_path: str, clock: Clock) -> AsyncIterator[QuotaGate]:
    """A ``QuotaGate`` over the quotas and schedules of the SQLite file ``db_path``."""
    quotas, schedules = SqliteQuotaStore(db_path), SqliteScheduleStore(db_path)
    await quotas.start()
    await schedules.start()
    try:
        yield QuotaGate(quotas, schedules, clock, QuotaSettings())
    finally:
        await schedules.close()
        await quotas.close()
