"""Delivery tokens: proof that a run result reports a delivery a dispatcher really published.

The dispatcher signs each delivery it publishes with the current key of a keyring that servers
and dispatchers share; the worker echoes the delivery, token included, in its results; the
server checks the token before it reads or writes anything for the result. A worker holds no
key and no store credentials, so it cannot make a token for a task, an attempt or a queue it
was not handed.

Token: ``t1.<key id>.<HMAC-SHA256, base64url without padding>``. The MAC covers a canonical
encoding of the delivery (``canonical``): a version label, the numbers at fixed width, then
every text, the payload and the map entries each as a 4-byte length followed by its bytes, so
no two different deliveries encode alike (no separator a value could contain, no field that
could slide into the next).

Keys file (JSON, mode 0600, written whole or not at all)::

    {"format": "tikk-delivery-keys/1",
     "current": "<key id that signs>",
     "keys": {"<key id>": "<secret, base64url>", ...}}

Lifetime: a token is checked against the server's clock. It is refused (``token_expired``)
once its delivery was fired longer ago than the caller's ``max_age_ms`` (``verify``, before
anything is read); the result recorder also refuses it a grace period after its attempt ended
(``server.ops.results``). While an attempt runs, nothing shorter applies: a worker renews its
message's lease for as long as the handler runs, and no heartbeat tells the server, so a
shorter life would strand the real result of a long run.

Rotation: ``rotate`` adds a key and makes it current, keeping the others for checking, so
deliveries signed before still verify; ``retire`` drops an old key once nothing signed with it
is in flight (a queue's retention). Processes read the file at start: rotate, restart the
servers (they now accept the new key), then the dispatchers (they sign with it).

Nothing here prints a secret: ``DeliveryKeys`` shows only its key ids, errors name key ids and
never a token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tikk.errors import FailedPrecondition, PermissionDenied
from tikk.model import Delivery

FORMAT = "tikk-delivery-keys/1"
_TOKEN_VERSION = "t1"
# Fixed, so a token of another purpose (or format version) never verifies as this one.
_LABEL = b"tikk.v1.Delivery/token/1\x00"
_NUMBERS = struct.Struct(">6q")
_NUMBERS_COUNT = struct.Struct(">I")
_SECRET_BYTES = 32


class TokenRefused(PermissionDenied):
    """A result's delivery token is missing, malformed, made with a key this process does not
    hold, or does not match the delivery. ``reason`` is a short label for counting."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class UnknownDeliveryKey(TokenRefused):
    """The token names a key this process does not hold: the processes disagree on the keys
    file (or a rotated file reached the dispatchers before the servers). Retriable: the same
    result verifies once the server runs with the key, so a worker keeps it and reports again
    rather than dropping a real run."""

    retriable = True


@dataclass(frozen=True)
class DeliveryKeys:
    """A keyring: ``current`` signs, every key in ``secrets`` verifies."""

    current: str
    secrets: Mapping[str, bytes] = field(repr=False)

    def __post_init__(self) -> None:
        if self.current not in self.secrets:
            raise FailedPrecondition(f"delivery keys: the current key {self.current} is missing")

    def __repr__(self) -> str:
        return f"DeliveryKeys(current={self.current!r}, key_ids={sorted(self.secrets)!r})"

    def sign(self, delivery: Delivery) -> str:
        """The token of ``delivery``, made with the current key."""
        mac = _mac(self.secrets[self.current], delivery)
        return f"{_TOKEN_VERSION}.{self.current}.{_b64(mac)}"

    def signed(self, delivery: Delivery) -> Delivery:
        """``delivery`` carrying its token."""
        return Delivery(
            delivery.entry, delivery.fired_ms, delivery.trace_context, self.sign(delivery)
        )

    def verify(self, delivery: Delivery, now_ms: int, max_age_ms: int) -> None:
        """Raise ``TokenRefused`` unless ``delivery.token`` was made by a key of this ring over
        exactly this delivery, and the delivery was fired at most ``max_age_ms`` before
        ``now_ms`` (the server's clock; ``token_expired`` otherwise, said only of a token that
        matches). Constant-time in the MAC comparison."""
        token = delivery.token
        if not token:
            raise TokenRefused(
                "missing",
                "the delivery token is missing: only deliveries a dispatcher published may be "
                "reported",
            )
        version, _, rest = token.partition(".")
        key_id, _, mac_text = rest.partition(".")
        if version != _TOKEN_VERSION or not key_id or not mac_text:
            raise TokenRefused("malformed", "the delivery token is malformed")
        secret = self.secrets.get(key_id)
        if secret is None:
            raise UnknownDeliveryKey(
                "unknown_key",
                f"the delivery token was made with key {key_id!r}, which this server does not "
                "hold: servers and dispatchers must share one delivery keys file",
            )
        if not hmac.compare_digest(mac_text, _b64(_mac(secret, delivery))):
            raise TokenRefused("mismatch", "the delivery token does not match the delivery")
        if now_ms - delivery.fired_ms > max_age_ms:
            raise expired_token(
                f"its delivery was fired {(now_ms - delivery.fired_ms) // 1000:,} s ago, and a "
                f"token is taken for {max_age_ms // 1000:,} s after that"
            )

    def rotated(self) -> DeliveryKeys:
        """A new current key; the previous ones still verify."""
        key_id = _new_key_id(self.secrets)
        return DeliveryKeys(key_id, {**self.secrets, key_id: secrets.token_bytes(_SECRET_BYTES)})

    def retired(self, key_id: str) -> DeliveryKeys:
        """Without ``key_id``, which must exist and not be the current key."""
        if key_id not in self.secrets:
            raise FailedPrecondition(
                f"no delivery key {key_id!r} (keys: {', '.join(sorted(self.secrets))})"
            )
        if key_id == self.current:
            raise FailedPrecondition(
                f"key {key_id!r} is the current key: rotate first, then retire it"
            )
        return DeliveryKeys(self.current, {k: v for k, v in self.secrets.items() if k != key_id})


def expired_token(why: str) -> TokenRefused:
    """The refusal of a genuine token that ran out (``why``: against what); the worker drops
    the result rather than report it again."""
    return TokenRefused("token_expired", f"the delivery token has expired: {why}")


def new_keys() -> DeliveryKeys:
    """A ring of one fresh random key."""
    key_id = _new_key_id({})
    return DeliveryKeys(key_id, {key_id: secrets.token_bytes(_SECRET_BYTES)})


def canonical(delivery: Delivery) -> bytes:
    """The bytes the MAC covers. Every field a result takes from its delivery is here, because
    each one steers where or how the result lands: namespace, task id and attempt pick the
    task and the attempt; due time picks the occurrence (a redriven task repeats attempt
    numbers, and the store's conditional writes match the due time); queue, because worker
    credentials are scoped to queues and a result must not be relabelled into another; start
    timeout, because it decides whether a late STARTED claim may still run; handler, times,
    idempotency key, labels, payload and trace context, because they are written to the run
    history or copied to the dead-letter stream as the task's own.

    Layout: the label, the numbers as fixed-width 8-byte integers, then each text, the payload
    and each map entry as a 4-byte length and its bytes (maps: entry count first, keys in
    order)."""
    e = delivery.entry
    out = bytearray(_LABEL)
    out += _NUMBERS.pack(
        e.attempt, e.due_ms, e.start_timeout_ms, e.max_attempts, e.scheduled_ms, delivery.fired_ms
    )
    for text in (e.namespace, e.task_id, e.queue, e.handler, e.idempotency_key):
        _put(out, text.encode())
    _put(out, e.payload)
    # What goes on the wire (``delivery_codec.to_proto``): the dispatch span's context, else
    # the task's.
    for values in (e.labels, delivery.trace_context or e.trace_context):
        out += _NUMBERS_COUNT.pack(len(values))
        for key in sorted(values):
            _put(out, key.encode())
            _put(out, values[key].encode())
    return bytes(out)


def _put(out: bytearray, value: bytes) -> None:
    out += len(value).to_bytes(4, "big")
    out += value


def _mac(secret: bytes, delivery: Delivery) -> bytes:
    # The one-shot form: about half the cost of an hmac object per token.
    return hmac.digest(secret, canonical(delivery), hashlib.sha256)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _new_key_id(taken: Mapping[str, bytes]) -> str:
    while (key_id := secrets.token_hex(4)) in taken:
        pass
    return key_id


# --- the keys file ---


def load_keys(path: str | Path) -> DeliveryKeys:
    """Read a keys file; ``FailedPrecondition`` names the file and what is wrong (never a
    secret)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise FailedPrecondition(
            f"no delivery keys file {p} (make one: tikk delivery-keys create {p})"
        ) from None
    except (OSError, ValueError) as exc:
        raise FailedPrecondition(
            f"cannot read delivery keys file {p}: {type(exc).__name__}"
        ) from None
    try:
        if doc["format"] != FORMAT:
            raise ValueError("format")
        ring = {str(k): _unb64(str(v)) for k, v in doc["keys"].items()}
        return DeliveryKeys(str(doc["current"]), ring)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise FailedPrecondition(f"delivery keys file {p} is not in the {FORMAT} format") from None


def save_keys(path: str | Path, keys: DeliveryKeys, *, replace: bool) -> bool:
    """Write ``keys`` to ``path`` (mode 0600) atomically: readers see the old file or the
    new one. ``replace=False`` writes only if no file exists (returns False if one did), so
    processes racing to create the default file agree on the first one written."""
    p = Path(path)
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # as the data dir it sits in
    doc = {
        "format": FORMAT,
        "current": keys.current,
        "keys": {k: _b64(v) for k, v in sorted(keys.secrets.items())},
    }
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, p)
            return True
        try:
            os.link(tmp, p)
        except FileExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)


def open_keys(path: str | Path) -> DeliveryKeys:
    """The keys of ``path``, created with one fresh key if there is no file yet (the default
    file under a data dir: processes sharing the directory agree with no configuration)."""
    if not Path(path).exists():
        save_keys(path, new_keys(), replace=False)
    return load_keys(path)


def _unb64(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) < 16:
        raise ValueError("short key")
    return raw


def keys_for(keys_file: str) -> DeliveryKeys:
    """The keyring a server or dispatcher runs with: the file's (created if absent), or with
    no file a fresh ring of this process alone, which suits a server dispatching in-process
    and nothing else (a separate dispatcher's results would be refused: unknown key)."""
    return open_keys(keys_file) if keys_file else new_keys()
