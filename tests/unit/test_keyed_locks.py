"""KeyedLocks: one caller per key at a time, different keys at once, no lock left behind."""

from __future__ import annotations

import asyncio

import pytest

from server.ops.keyed_locks import KeyedLocks


async def _hold(locks: KeyedLocks[str], key: str, log: list[str], name: str) -> None:
    async with locks.held(key):
        log.append(f"{name} in")
        await asyncio.sleep(0.01)
        log.append(f"{name} out")


async def test_callers_of_one_key_go_one_at_a_time() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    log: list[str] = []
    await asyncio.gather(*(_hold(locks, "a", log, n) for n in ("1", "2", "3")))
    assert log == ["1 in", "1 out", "2 in", "2 out", "3 in", "3 out"]
    assert len(locks) == 0


async def test_callers_of_different_keys_do_not_wait_for_each_other() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    log: list[str] = []
    await asyncio.gather(_hold(locks, "a", log, "a"), _hold(locks, "b", log, "b"))
    assert log[:2] == ["a in", "b in"]
    assert len(locks) == 0


async def test_a_failing_holder_releases_its_key() -> None:
    locks: KeyedLocks[str] = KeyedLocks()

    async def fail() -> None:
        async with locks.held("a"):
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await fail()
    assert len(locks) == 0
    async with asyncio.timeout(1):
        async with locks.held("a"):
            assert len(locks) == 1
