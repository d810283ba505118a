"""One owner for an embedded store: the owner lock, which processes take it, the modes of the
files the embedded store creates, and a fenced dispatcher that lets its shards go for good."""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dispatcher.ownership import SingleOwner
from dispatcher.ready_queue.local import LocalReadyQueue
from dispatcher.scanner import Dispatcher
from server.runtime import store_owner
from tests.factories import T0, make_task
from tikk.clock import ManualClock
from tikk.errors import FailedPrecondition
from tikk.settings import DispatchSettings, Settings, embedded_urls
from tikk.store.sqlite.owner_lock import LOCK_FILE, OwnerLock
from tikk.store.sqlite.tasks import SqliteTaskStore
from worker_sdk.queues.local import LocalQueueConsumer

SHARDS = 4


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_second_owner_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    with OwnerLock.take(tmp_path), pytest.raises(FailedPrecondition) as refused:
        OwnerLock.take(tmp_path)
    assert f"owned by pid {os.getpid()}" in str(refused.value)
    assert str(tmp_path / LOCK_FILE) in str(refused.value)
    OwnerLock.take(tmp_path).release()  # released at the end of the block


def test_an_owner_killed_with_sigkill_leaves_the_store_to_the_next(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(FailedPrecondition, match=f"owned by pid {holder.pid}"):
            OwnerLock.take(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()
    with OwnerLock.take(tmp_path) as lock:
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        assert lock.path == tmp_path / LOCK_FILE


_HOLD = """
import sys, time
from pathlib import Path
from tikk.store.sqlite.owner_lock import OwnerLock
lock = OwnerLock.take(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(120)
"""


def test_the_lock_makes_a_private_directory_and_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with OwnerLock.take(data):
        assert mode(data) == 0o700
        assert mode(data / LOCK_FILE) == 0o600


def test_only_a_dispatcher_owning_every_shard_of_sqlite_files_takes_the_lock(
    tmp_path: Path,
) -> None:
    urls = embedded_urls(tmp_path)
    embedded = Settings(urls["store_url"], urls["history_url"], urls["queue_url"])
    with store_owner(embedded), pytest.raises(FailedPrecondition):
        OwnerLock.take(tmp_path)
    # ZooKeeper divides the shards among dispatchers; Cassandra has no directory to share.
    zk = Settings(urls["store_url"], urls["history_url"], urls["queue_url"], "zk://h:1/t")
    cassandra = Settings("cassandra://h:1/ks", "cassandra://h:1/ks", urls["queue_url"])
    with OwnerLock.take(tmp_path), store_owner(zk), store_owner(cassandra):
        pass


async def test_sqlite_files_and_their_folder_are_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = SqliteTaskStore(str(data / "tikk.db"), SHARDS)
    await store.start()
    try:
        await store.create(make_task("a", shard_count=SHARDS))
        files = sorted(p.name for p in data.iterdir())
        assert files == ["tikk.db", "tikk.db-shm", "tikk.db-wal"]
        assert {name: mode(data / name) for name in files} == dict.fromkeys(files, 0o600)
        assert mode(data) == 0o700
    finally:
        await store.close()


async def test_a_fenced_dispatcher_says_so_once_and_lets_its_shards_go(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    queue = LocalReadyQueue(str(tmp_path / "queue.db"))
    consumer = LocalQueueConsumer(str(tmp_path / "queue.db"), ["q"], 60_000)
    for backend in (store, queue, consumer):
        await backend.start()
    try:
        settings = DispatchSettings(prefetch_ms=2_000, late_write_grace_s=5)
        clock = ManualClock(T0)
        old, new = (
            Dispatcher(store, queue, SingleOwner(SHARDS, epoch), clock, settings=settings)
            for epoch in (1, 2)
        )
        await new.tick(T0 + 20_000)
        await store.create(make_task("late", due_ms=T0 + 45_000, shard_count=SHARDS))
        with caplog.at_level(logging.WARNING, logger="tikk.dispatcher"):
            for second in range(40, 50):
                await old.tick(T0 + second * 1_000)
        fenced = [r for r in caplog.records if "taken over" in r.getMessage()]
        assert [r.getMessage() for r in fenced] == [
            f"{SHARDS} shard(s) taken over by a newer owner; dropping them"
        ]
        assert old.held == 0 and old.stats.published == 0  # the newer owner's tasks
        assert await consumer.fetch(10) == []
    finally:
        for backend in (consumer, queue, store):
            await backend.close()
