"""``KeyedLocks``: one asyncio lock per key, kept only while someone holds or waits for it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)


class KeyedLocks(Generic[Key]):
    """Callers of one key go one at a time; callers of different keys do not wait for each
    other. A key's lock is dropped when its last holder leaves, so the map stays as small as
    the number of keys in use."""

    def __init__(self) -> None:
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        """Keys held or waited for now."""
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def held(self, key: Key) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
