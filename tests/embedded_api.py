"""A real ``ApiServer`` on the embedded backends (files under a test's folder), on a free
loopback port, for tests of what the API answers."""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from server.app import ApiServer
from server.wiring import Backends, open_backends
from tikk.clock import Clock, SystemClock
from tikk.delivery_tokens import new_keys
from tikk.settings import Settings, embedded_urls
from tikk.store.tasks import TaskStore


def embedded_settings(tmp_path: Path, store_url: str = "", **changes: Any) -> Settings:
    """Embedded settings on files under ``tmp_path`` (the task store at ``store_url`` if
    given), listening on a free port; ``changes`` are other ``Settings`` fields."""
    urls = embedded_urls(tmp_path)
    return Settings(
        store_url=store_url or urls["store_url"], history_url=urls["history_url"],
        queue_url=urls["queue_url"], listen="127.0.0.1:0", **changes,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Served:
    """A running server: its address, a channel to it, and the backends it uses."""

    address: str
    channel: grpc.aio.Channel
    backends: Backends


@contextlib.asynccontextmanager
async def embedded_api(
    settings: Settings, *, clock: Clock | None = None, store: TaskStore | None = None
) -> AsyncIterator[Served]:
    """Serve ``settings`` until the block ends; ``store`` stands in for the task store the
    settings name (a test's own subclass of an embedded store, which the test closes)."""
    opened = await open_backends(settings)
    backends = opened if store is None else dataclasses.replace(opened, store=store)
    api = ApiServer(settings, backends, clock or SystemClock(), random.Random(1), keys=new_keys())
    try:
        address = f"127.0.0.1:{await api.start()}"
        async with grpc.aio.insecure_channel(address) as channel:
            yield Served(address, channel, backends)
    finally:
        await api.stop()
        await opened.close()
