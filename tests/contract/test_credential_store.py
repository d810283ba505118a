"""The credential store contract, run against the embedded SQLite file and real Cassandra."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.wiring import CREDENTIAL_STORES, TASK_STORES, Drivers
from tests.contract import cassandra_keyspace
from tests.contract.conftest import backend_url, open_backend
from tikk.credentials import (
    Credential,
    Grant,
    Role,
    issue_secret,
    new_credential_id,
    split_token,
)
from tikk.errors import AlreadyExists, FailedPrecondition, NotFound
from tikk.store.credentials import CredentialStore

NOW = 1_700_000_000_000


@pytest.fixture(params=["sqlite", "cassandra"])
async def url(
    request: pytest.FixtureRequest, tmp_path: Path, keyspace: cassandra_keyspace.TestKeyspace
) -> str:
    return backend_url(request.param, tmp_path, keyspace)


@pytest.fixture
async def credentials(url: str) -> AsyncIterator[CredentialStore]:
    store = await open_backend(CREDENTIAL_STORES, url, Drivers())
    yield store
    await store.close()


def _credential(*grants: str, subject: str = "") -> tuple[Credential, str]:
    """A new credential and its token."""
    credential_id = new_credential_id()
    issued = issue_secret(credential_id)
    credential = Credential(
        credential_id=credential_id,
        name=f"caller-{credential_id[:6]}",
        salt=issued.salt,
        secret_hash=issued.secret_hash,
        grants=tuple(Grant.parse(g) for g in grants),
        created_ms=NOW,
        subject=subject,
    )
    return credential, issued.token


def _secret(token: str) -> str:
    parts = split_token(token)
    assert parts is not None
    return parts[1]


async def test_a_created_credential_reads_back_whole(credentials: CredentialStore) -> None:
    credential, token = _credential("read:payments", "worker:emails", "admin:*", subject="cn-1")
    await credentials.create(credential)
    stored = await credentials.get(credential.credential_id)
    assert stored == credential
    assert stored.matches(_secret(token))
    assert stored.allows(Role.WRITE, "anything") and stored.allows(Role.WORKER, "emails")
    assert not stored.allows(Role.WORKER, "sms")


async def test_an_id_is_created_once(credentials: CredentialStore) -> None:
    credential, _ = _credential("read:a")
    await credentials.create(credential)
    with pytest.raises(AlreadyExists):
        await credentials.create(credential)


async def test_unknown_ids_are_not_found(credentials: CredentialStore) -> None:
    missing = new_credential_id()
    with pytest.raises(NotFound):
        await credentials.get(missing)
    with pytest.raises(NotFound):
        await credentials.revoke(missing, NOW)
    issued = issue_secret(missing)
    with pytest.raises(NotFound):
        await credentials.rotate(missing, issued.salt, issued.secret_hash, NOW)
    assert await credentials.list_all() == []


async def test_list_holds_every_credential_by_id_revoked_ones_too(
    credentials: CredentialStore,
) -> None:
    made = [_credential(f"read:ns{i}")[0] for i in range(5)]
    for credential in made:
        await credentials.create(credential)
    await credentials.revoke(made[2].credential_id, NOW + 5)
    listed = await credentials.list_all()
    assert [c.credential_id for c in listed] == sorted(c.credential_id for c in made)
    assert [c.revoked for c in listed] == [c.credential_id == made[2].credential_id
                                           for c in listed]  # fmt: skip


async def test_revoking_keeps_the_first_time(credentials: CredentialStore) -> None:
    credential, _ = _credential("write:a")
    await credentials.create(credential)
    first = await credentials.revoke(credential.credential_id, NOW + 10)
    again = await credentials.revoke(credential.credential_id, NOW + 20)
    assert first.revoked_ms == again.revoked_ms == NOW + 10
    assert (await credentials.get(credential.credential_id)).revoked_ms == NOW + 10


async def test_rotation_replaces_the_secret(credentials: CredentialStore) -> None:
    credential, old_token = _credential("read:a")
    await credentials.create(credential)
    issued = issue_secret(credential.credential_id)
    rotated = await credentials.rotate(
        credential.credential_id, issued.salt, issued.secret_hash, NOW + 1
    )
    stored = await credentials.get(credential.credential_id)
    assert rotated == stored and stored.rotated_ms == NOW + 1
    assert stored.matches(_secret(issued.token))
    assert not stored.matches(_secret(old_token))
    assert stored.grants == credential.grants


async def test_a_revoked_credential_cannot_be_rotated_back_to_life(
    credentials: CredentialStore,
) -> None:
    credential, _ = _credential("read:a")
    await credentials.create(credential)
    await credentials.revoke(credential.credential_id, NOW)
    issued = issue_secret(credential.credential_id)
    with pytest.raises(FailedPrecondition):
        await credentials.rotate(credential.credential_id, issued.salt, issued.secret_hash, NOW)
    assert (await credentials.get(credential.credential_id)).revoked


async def test_another_process_sees_a_revocation(credentials: CredentialStore, url: str) -> None:
    """A second store on the same database (as another server process opens it) reads what
    the first wrote, on its next read."""
    credential, _ = _credential("read:a")
    await credentials.create(credential)
    other = await open_backend(CREDENTIAL_STORES, url, Drivers())
    try:
        assert not (await other.list_all())[0].revoked
        await credentials.revoke(credential.credential_id, NOW)
        assert (await other.list_all())[0].revoked
    finally:
        await other.close()


async def test_the_store_shares_the_task_stores_database(url: str) -> None:
    """Credentials and tasks in one database: both open on the same URL side by side."""
    drivers = Drivers()
    tasks = await open_backend(TASK_STORES, url, drivers)
    store = await open_backend(CREDENTIAL_STORES, url, drivers)
    try:
        credential, _ = _credential("read:a")
        await store.create(credential)
        assert await store.get(credential.credential_id) == credential
    finally:
        await store.close()
        await tasks.close()
