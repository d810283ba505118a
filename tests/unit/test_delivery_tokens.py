"""Delivery tokens: what they cover, rotation and retirement, and the keys file."""

from __future__ import annotations

import dataclasses
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from server.cli import build_parser
from server.cli.options import settings
from tikk import delivery_codec
from tikk.delivery_tokens import (
    DeliveryKeys,
    TokenRefused,
    UnknownDeliveryKey,
    canonical,
    load_keys,
    new_keys,
    open_keys,
    save_keys,
)
from tikk.errors import FailedPrecondition
from tikk.model import Delivery, DueEntry
from tikk.v1 import worker_pb2

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
DAY_MS = 86_400_000
# A server's clock a second after the test deliveries were fired, and a lifetime of a day.
NOW = (T0 + 1_005, DAY_MS)


def delivery(**changes: Any) -> Delivery:
    fired = changes.pop("fired_ms", T0 + 5)
    trace = changes.pop("trace_context", {"traceparent": "00-abc-def-01"})
    entry = DueEntry(
        shard=3, due_ms=T0, namespace="ns", task_id="t1", attempt=2, queue="q", handler="h",
        payload=b"body", labels={"a": "1"}, max_attempts=5, scheduled_ms=T0 - 10,
        start_timeout_ms=0,
    )  # fmt: skip
    return Delivery(dataclasses.replace(entry, **changes), fired, trace)


CHANGES: dict[str, dict[str, Any]] = {
    "namespace": {"namespace": "other"},
    "task id": {"task_id": "t2"},
    "queue": {"queue": "r"},
    "attempt": {"attempt": 3},
    "due time": {"due_ms": T0 + 1000},
    "start timeout": {"start_timeout_ms": 60_000},
    "handler": {"handler": "g"},
    "payload": {"payload": b"bodY"},
    "labels": {"labels": {"a": "2"}},
    "max attempts": {"max_attempts": 6},
    "scheduled time": {"scheduled_ms": T0},
    "fired time": {"fired_ms": T0 + 6},
    "trace context": {"trace_context": {"traceparent": "00-abc-xyz-01"}},
}


def test_a_signed_delivery_verifies() -> None:
    keys = new_keys()
    keys.verify(keys.signed(delivery()), *NOW)


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_a_token_does_not_match_a_changed_delivery(change: dict[str, Any]) -> None:
    keys = new_keys()
    token = keys.sign(delivery())
    forged = dataclasses.replace(delivery(**change), token=token)
    with pytest.raises(TokenRefused) as refused:
        keys.verify(forged, *NOW)
    assert refused.value.reason == "mismatch"
    assert token not in str(refused.value)


def test_a_token_runs_out_its_lifetime_after_its_delivery_was_fired() -> None:
    """Measured on the server's clock from the fired time, which the token covers: a token
    is taken up to its lifetime, and refused for good after it."""
    keys = new_keys()
    signed = keys.signed(delivery())
    fired = signed.fired_ms
    keys.verify(signed, fired + DAY_MS, DAY_MS)
    with pytest.raises(TokenRefused) as refused:
        keys.verify(signed, fired + DAY_MS + 1, DAY_MS)
    assert refused.value.reason == "token_expired"
    assert not isinstance(refused.value, UnknownDeliveryKey)  # not retriable: dropped
    assert "86,400 s" in str(refused.value) and signed.token not in str(refused.value)


def test_only_a_matching_token_is_said_to_have_expired() -> None:
    keys = new_keys()
    forged = dataclasses.replace(delivery(payload=b"other"), token=keys.sign(delivery()))
    with pytest.raises(TokenRefused) as refused:
        keys.verify(forged, T0 + 10 * DAY_MS, DAY_MS)
    assert refused.value.reason == "mismatch"


def test_the_encoding_tells_field_boundaries_apart() -> None:
    assert canonical(delivery(namespace="ab", task_id="c")) != canonical(
        delivery(namespace="a", task_id="bc")
    )
    assert canonical(delivery(labels={"a": "1b"})) != canonical(delivery(labels={"a1": "b"}))


@pytest.mark.parametrize(
    ("token", "reason"),
    [("", "missing"), ("garbage", "malformed"), ("t2.k.mac", "malformed"), ("t1.k.", "malformed")],
)
def test_missing_or_malformed_tokens_are_refused(token: str, reason: str) -> None:
    with pytest.raises(TokenRefused) as refused:
        new_keys().verify(dataclasses.replace(delivery(), token=token), *NOW)
    assert refused.value.reason == reason


def test_a_token_of_another_keyring_names_the_unknown_key() -> None:
    signed = new_keys().signed(delivery())
    with pytest.raises(UnknownDeliveryKey, match="does not hold"):
        new_keys().verify(signed, *NOW)


def test_a_token_of_the_same_key_id_but_another_secret_does_not_match() -> None:
    keys = new_keys()
    impostor = DeliveryKeys(keys.current, {keys.current: b"x" * 32})
    with pytest.raises(TokenRefused, match="does not match"):
        keys.verify(impostor.signed(delivery()), *NOW)


def test_after_rotation_the_previous_key_verifies_and_the_new_one_signs() -> None:
    old = new_keys()
    before = old.signed(delivery())
    rotated = old.rotated()
    assert rotated.current != old.current
    rotated.verify(before, *NOW)
    after = rotated.signed(delivery())
    assert after.token.split(".")[1] == rotated.current
    with pytest.raises(UnknownDeliveryKey):
        old.verify(after, *NOW)  # a server not yet restarted: retriable, not a mismatch


def test_a_retired_key_verifies_nothing_and_the_current_key_cannot_be_retired() -> None:
    old = new_keys()
    before = old.signed(delivery())
    rotated = old.rotated()
    retired = rotated.retired(old.current)
    with pytest.raises(UnknownDeliveryKey):
        retired.verify(before, *NOW)
    retired.verify(rotated.signed(delivery()), *NOW)
    with pytest.raises(FailedPrecondition, match="current key"):
        retired.retired(retired.current)
    with pytest.raises(FailedPrecondition, match="no delivery key"):
        retired.retired("nope")


def test_the_token_survives_the_wire() -> None:
    keys = new_keys()
    signed = keys.signed(delivery(start_timeout_ms=30_000))
    wire = delivery_codec.to_proto(signed).SerializeToString()
    back = delivery_codec.from_proto(worker_pb2.Delivery.FromString(wire), 16)
    assert back.token == signed.token
    keys.verify(back, *NOW)


def test_the_keys_file_is_private_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "keys"
    keys = new_keys().rotated()
    assert save_keys(path, keys, replace=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_keys(path) == keys
    assert not save_keys(path, new_keys(), replace=False)  # the first one written stays
    assert load_keys(path) == keys
    assert list(path.parent.iterdir()) == [path]  # no temporary left behind
    secret = json.loads(path.read_text())["keys"][keys.current]
    assert secret not in repr(keys)


def test_open_keys_creates_the_file_once(tmp_path: Path) -> None:
    path = tmp_path / "delivery-keys"
    first = open_keys(path)
    assert open_keys(path) == first


@pytest.mark.parametrize(
    "content", ["", "{}", '{"format": "other", "current": "a", "keys": {}}', "[1]"]
)
def test_a_bad_keys_file_is_refused_with_its_name(tmp_path: Path, content: str) -> None:
    path = tmp_path / "keys"
    path.write_text(content)
    with pytest.raises(FailedPrecondition, match=str(path)):
        load_keys(path)


def tikk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_cli_creates_rotates_and_retires_without_printing_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    outputs = [tikk("delivery-keys", "create", str(path))]
    first = load_keys(path)
    outputs.append(tikk("delivery-keys", "rotate", str(path)))
    rotated = load_keys(path)
    assert set(rotated.secrets) > set(first.secrets) and rotated.current != first.current
    outputs.append(tikk("delivery-keys", "retire", str(path), first.current))
    assert set(load_keys(path).secrets) == {rotated.current}
    assert all(o.returncode == 0 for o in outputs), outputs
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    refused = [
        tikk("delivery-keys", "create", str(path)),
        tikk("delivery-keys", "retire", str(path), rotated.current),
        tikk("delivery-keys", "rotate", str(tmp_path / "missing")),
    ]
    assert [o.returncode for o in refused] == [1, 1, 1]
    printed = "".join(o.stdout + o.stderr for o in outputs + refused)
    for secret in json.loads(path.read_text())["keys"].values():
        assert secret not in printed
    assert rotated.current in printed


def test_servers_and_dispatchers_default_to_the_file_under_their_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIKK_DELIVERY_KEYS", raising=False)
    parser = build_parser()
    data = ["--data-dir", str(tmp_path)]
    for command in (["server", *data], ["dispatcher", *data], ["dev", *data]):
        security = settings(parser.parse_args(command)).security
        assert security.delivery_keys_file == str(tmp_path.resolve() / "delivery-keys")
    given = parser.parse_args(["dispatcher", *data, "--delivery-keys", "/elsewhere/keys"])
    assert settings(given).security.delivery_keys_file == "/elsewhere/keys"
