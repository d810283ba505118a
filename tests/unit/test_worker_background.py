"""Loops beside a worker's main loop (``worker_sdk.background.beside``) end with it, and
leave nothing behind to be logged once they are collected."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from worker_sdk.background import beside


async def _forever(seen: list[str]) -> None:
    try:
        await asyncio.sleep(3600)
    finally:
        seen.append("ended")


def test_side_loops_end_with_the_block_and_nothing_is_logged_after(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    async def main() -> None:
        with pytest.raises(RuntimeError, match="the block's own error"):
            async with beside(_forever(seen), _forever(seen)):
                await asyncio.sleep(0)
                raise RuntimeError("the block's own error")
        assert seen == ["ended", "ended"]

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(main())
        gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_side_loop_that_fails_is_logged_and_the_others_still_end_with_the_block(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    async def fails() -> None:
        raise ValueError("side failure")

    async def main() -> str:
        async with beside(fails(), _forever(seen)):
            await asyncio.sleep(0.01)
            assert seen == []  # the other loop goes on
            result = "block finished"
        assert seen == ["ended"]  # and ends with the block
        return result

    with caplog.at_level(logging.ERROR, logger="tikk.worker"):
        assert asyncio.run(main()) == "block finished"
    assert any("side failure" in r.getMessage() for r in caplog.records)
