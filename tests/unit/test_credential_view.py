"""The authenticator's view of the credential store, on a real SQLite store; time moves only
when the test moves it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from server.auth.authenticator import CredentialView, bearer_token, certificate_subject
from tikk.credentials import Credential, Grant, issue_secret, new_credential_id
from tikk.errors import BackendUnavailable, Unauthenticated
from tikk.store.sqlite.credentials import SqliteCredentialStore


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteCredentialStore]:
    s = SqliteCredentialStore(str(tmp_path / "tikk.db"))
    await s.start()
    yield s
    await s.close()


async def _add(store: SqliteCredentialStore, grant: str, subject: str = "") -> tuple[str, str]:
    """A stored credential: (id, token)."""
    credential_id = new_credential_id()
    issued = issue_secret(credential_id)
    grants = (Grant.parse(grant),)
    credential = Credential(credential_id, "c", issued.salt, issued.secret_hash, grants, 0)
    await store.create(replace(credential, subject=subject))
    return credential_id, issued.token


async def test_a_token_names_its_credential(store: SqliteCredentialStore) -> None:
    credential_id, token = await _add(store, "read:a")
    view = CredentialView(store, monotonic=Ticks())
    assert (await view.authenticate(token, None)).credential_id == credential_id


@pytest.mark.parametrize(
    "bad", ["", "tikk_x", "Bearer x", "tikk_zz_secret", "tikk_" + "0" * 32 + "_nope"]
)
async def test_bad_tokens_are_unauthenticated_and_not_repeated(
    store: SqliteCredentialStore, bad: str
) -> None:
    await _add(store, "read:a")
    view = CredentialView(store, monotonic=Ticks())
    with pytest.raises(Unauthenticated) as refused:
        await view.authenticate(bad, None)
    assert not bad or bad not in str(refused.value)


async def test_a_changed_secret_is_refused(store: SqliteCredentialStore) -> None:
    _, token = await _add(store, "read:a")
    view = CredentialView(store, monotonic=Ticks())
    with pytest.raises(Unauthenticated, match="invalid or revoked"):
        await view.authenticate(token[:-2] + ("AA" if not token.endswith("AA") else "BB"), None)


async def test_a_revocation_applies_within_the_view_age(store: SqliteCredentialStore) -> None:
    credential_id, token = await _add(store, "read:a")
    ticks = Ticks()
    view = CredentialView(store, fresh_s=2, max_age_s=5, monotonic=ticks)
    await view.authenticate(token, None)
    await store.revoke(credential_id, 1)
    ticks.now += 1  # fresh: the view is used as it is
    await view.authenticate(token, None)
    ticks.now += 5  # too old: the call waits for a reload
    with pytest.raises(Unauthenticated):
        await view.authenticate(token, None)


async def test_a_rotated_token_replaces_the_old_one(store: SqliteCredentialStore) -> None:
    credential_id, old = await _add(store, "read:a")
    ticks = Ticks()
    view = CredentialView(store, monotonic=ticks)
    await view.authenticate(old, None)
    issued = issue_secret(credential_id)
    await store.rotate(credential_id, issued.salt, issued.secret_hash, 1)
    ticks.now += 10
    assert (await view.authenticate(issued.token, None)).credential_id == credential_id
    with pytest.raises(Unauthenticated):
        await view.authenticate(old, None)


async def test_a_certificate_subject_maps_to_one_credential(store: SqliteCredentialStore) -> None:
    credential_id, _ = await _add(store, "read:a", subject="svc-a")
    await _add(store, "read:b", subject="shared")
    await _add(store, "read:c", subject="shared")
    view = CredentialView(store, monotonic=Ticks())
    assert (await view.authenticate(None, "svc-a")).credential_id == credential_id
    for unknown in ("svc-x", "shared"):  # none, or two that claim it
        with pytest.raises(Unauthenticated):
            await view.authenticate(None, unknown)
    with pytest.raises(Unauthenticated, match="credential is required"):
        await view.authenticate(None, None)


async def test_a_store_that_does_not_answer_is_unavailable(
    store: SqliteCredentialStore,
) -> None:
    _, token = await _add(store, "read:a")
    ticks = Ticks()
    view = CredentialView(store, monotonic=ticks)
    await view.authenticate(token, None)
    await store.close()
    ticks.now += 3  # stale but usable: answered from the view, a reload fails behind it
    await view.authenticate(token, None)
    ticks.now += 10
    with pytest.raises(BackendUnavailable):
        await view.authenticate(token, None)


def test_the_authorization_header_carries_a_bearer_token() -> None:
    assert bearer_token([("authorization", "Bearer tikk_x_y")]) == "tikk_x_y"
    assert bearer_token([("other", "v")]) is None
    for bad in ([("authorization", "Basic abc")], [("authorization", "Bearer ")],
                [("authorization", "Bearer a"), ("authorization", "Bearer b")]):  # fmt: skip
        with pytest.raises(Unauthenticated):
            bearer_token(bad)


def test_only_a_verified_tls_peer_has_a_subject() -> None:
    tls = {"transport_security_type": [b"ssl"], "x509_common_name": [b"svc-a"]}
    assert certificate_subject(tls) == "svc-a"
    assert certificate_subject({"transport_security_type": [b"insecure"]}) is None
    assert certificate_subject({"transport_security_type": [b"ssl"]}) is None


def test_a_credential_never_shows_its_secret_parts() -> None:
    issued = issue_secret(new_credential_id())
    text = repr(Credential("i", "n", issued.salt, issued.secret_hash, (), 0)) + repr(issued)
    assert issued.secret_hash.hex() not in text and issued.token not in text
    assert repr(issued.secret_hash) not in text and repr(issued.salt) not in text
