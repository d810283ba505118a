"""Files tikk creates outside the stores hold secrets or tenant data too: a worker that opens
the local queue first, the delivery keys and the development PKI are private to their user."""

from __future__ import annotations

import stat
from pathlib import Path

from server.certs import make_dev_pki
from tikk.delivery_tokens import new_keys, save_keys
from worker_sdk.queues.local import LocalQueueConsumer


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_worker_opening_the_local_queue_first_creates_it_private(tmp_path: Path) -> None:
    path = tmp_path / "data" / "queue.db"
    consumer = LocalQueueConsumer(str(path), ["q"], 30_000)
    await consumer.start()
    await consumer.close()
    assert (mode(path.parent), mode(path)) == (0o700, 0o600)


def test_the_delivery_keys_and_their_folder_are_private(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "delivery-keys"
    assert save_keys(path, new_keys(), replace=False)
    assert (mode(path.parent), mode(path)) == (0o700, 0o600)


def test_the_development_pki_folder_is_private(tmp_path: Path) -> None:
    make_dev_pki(tmp_path / "tls")
    assert mode(tmp_path / "tls") == 0o700
