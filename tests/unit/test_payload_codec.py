"""Typed payloads (``tikk.payload_codec``): what encodes, what decodes, and the errors that name
the field a payload got wrong."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import pydantic
import pytest

from tikk.payload_codec import PayloadInvalid, decode_payload, encode_payload


class Tier(enum.Enum):
    FREE = "free"
    PRO = "pro"


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int
    price: float


@dataclass(frozen=True)
class Order:
    customer: str
    lines: list[Line]
    tier: Tier
    placed: datetime
    note: str | None = None
    tags: tuple[str, ...] = ()
    extra: dict[str, int] = field(default_factory=dict)
    channel: Literal["web", "shop"] = "web"


class Signup(pydantic.BaseModel):
    email: str
    age: int


ORDER = Order(
    customer="c-1",
    lines=[Line("a", 2, 9.5), Line("b", 1, 3.0)],
    tier=Tier.PRO,
    placed=datetime(2026, 12, 5, 9, 0, tzinfo=UTC),
    tags=("x",),
    extra={"n": 1},
)


def test_a_dataclass_goes_through_json_and_back_unchanged() -> None:
    data = encode_payload(ORDER)
    assert b'"tier":"pro"' in data and b'"placed":"2026-12-05T09:00:00+00:00"' in data
    assert decode_payload(data, Order) == ORDER


def test_raw_bytes_text_and_json_values_keep_their_meaning() -> None:
    assert encode_payload(b"\x00\xff") == b"\x00\xff" and encode_payload(None) == b""
    assert decode_payload(b"\x00\xff", bytes) == b"\x00\xff"
    assert decode_payload(encode_payload("hé"), str) == "hé"
    assert decode_payload(encode_payload({"a": [1, 2]}), dict[str, list[int]]) == {"a": [1, 2]}
    assert decode_payload(b"3", float) == 3.0 and decode_payload(b"x", Any) == b"x"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lines": [{"sku": "a", "quantity": "2", "price": 1.0}]},
         "payload.lines[0].quantity: expected int, got str '2'"),
        ({"tier": "gold"}, "payload.tier: expected one of ['free', 'pro'], got str 'gold'"),
        ({"placed": "yesterday"}, "payload.placed: expected ISO 8601 datetime text"),
        ({"surprise": 1}, "payload: unknown field(s) 'surprise'"),
        ({"channel": "fax"}, "payload.channel: expected one of ['web', 'shop']"),
        ({"lines": [{"sku": "a", "quantity": True, "price": 1.0}]},
         "payload.lines[0].quantity: expected int, got bool True"),
    ],
)  # fmt: skip
def test_a_payload_that_does_not_fit_names_the_field(change: dict[str, Any], message: str) -> None:
    good = {"customer": "c", "lines": [], "tier": "free", "placed": "2026-12-05T09:00:00"}
    with pytest.raises(PayloadInvalid) as caught:
        decode_payload(encode_payload({**good, **change}), Order)
    assert message in str(caught.value)


def test_missing_fields_and_non_json_are_refused() -> None:
    with pytest.raises(PayloadInvalid, match="missing field\\(s\\) 'lines', 'tier', 'placed'"):
        decode_payload(b'{"customer": "c"}', Order)
    with pytest.raises(PayloadInvalid, match="payload is not JSON"):
        decode_payload(b"{not json", Order)
    with pytest.raises(PayloadInvalid, match="not UTF-8 text"):
        decode_payload(b"\xff", str)


def test_a_pydantic_model_uses_its_own_validation() -> None:
    data = encode_payload(Signup(email="a@b.c", age=30))
    assert decode_payload(data, Signup) == Signup(email="a@b.c", age=30)
    with pytest.raises(PayloadInvalid, match="payload does not fit Signup") as caught:
        decode_payload(b'{"email": "a@b.c", "age": "old"}', Signup)
    assert "age" in str(caught.value)


def test_what_json_cannot_carry_is_refused_when_encoding() -> None:
    with pytest.raises(TypeError, match="cannot encode a object"):
        encode_payload({"a": object()})
    with pytest.raises(TypeError, match="keys are text"):
        encode_payload({1: "a"})
