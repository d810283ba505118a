"""Page tokens (``tikk.paging``): what the server hands out comes back as it was; anything
else a client sends (random, truncated, tampered, forged) is ``InvalidArgument`` on
``page_token``, never another exception and never a value a store cannot take."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from devtools.fuzz.messages import page_token
from tikk.errors import InvalidArgument
from tikk.paging import MAX_PAGE_SIZE, decode_token, encode_token, page_size

_INT64 = st.integers(-(2**63), 2**63 - 1)
_STORABLE_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)
_SHAPES = [(str,), (int, str), (int, int), (int, int, str), (int, int, int)]


def _forged(parts: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode()


def _decodes_or_refuses(token: str, shape: tuple[type, ...]) -> None:
    try:
        parts = decode_token(token, shape)
    except InvalidArgument as exc:
        assert exc.field == "page_token"
        return
    if parts is None:
        assert token == ""
        return
    assert [type(p) for p in parts] == list(shape)
    for p in parts:
        if isinstance(p, int):
            assert -(2**63) <= p < 2**63
        else:
            p.encode()  # a store can send it


@given(st.data(), st.sampled_from(_SHAPES))
def test_tokens_the_server_makes_round_trip(data: st.DataObject, shape: tuple[type, ...]) -> None:
    parts: list[int | str] = [
        data.draw(_INT64) if t is int else data.draw(_STORABLE_TEXT) for t in shape
    ]
    assert decode_token(encode_token(*parts), shape) == parts


@given(page_token(), st.sampled_from(_SHAPES))
@example(_forged([10**30]), (int, str))  # outside a 64-bit column
@example(_forged(["\ud800"]), (str,))  # a lone surrogate: no store can encode it
@example(_forged([1, "\udfff"]), (int, str))
@example(base64.urlsafe_b64encode(b"[" * 100_000).decode(), (str,))  # deeper than the parser
@example(_forged([True, "x"]), (int, str))
@example(_forged([1.5, "x"]), (int, str))
@example("%%%", (str,))
@example(base64.urlsafe_b64encode(b"\xff\xfe[1]").decode(), (int,))
def test_any_token_decodes_to_its_shape_or_is_refused(token: str, shape: tuple[type, ...]) -> None:
    _decodes_or_refuses(token, shape)


@given(st.text(max_size=200), st.sampled_from(_SHAPES))
def test_random_text_decodes_to_its_shape_or_is_refused(
    token: str, shape: tuple[type, ...]
) -> None:
    _decodes_or_refuses(token, shape)


@given(st.lists(_INT64, min_size=1, max_size=3), st.data())
def test_a_truncated_token_is_refused_or_still_well_formed(
    parts: list[int], data: st.DataObject
) -> None:
    token = encode_token(*parts)
    cut = data.draw(st.integers(1, len(token) - 1))
    _decodes_or_refuses(token[:cut], (int,) * len(parts))


@given(st.integers(-(2**63), 2**63))
def test_page_sizes_are_the_default_in_range_or_refused(requested: int) -> None:
    try:
        size = page_size(requested)
    except InvalidArgument as exc:
        assert exc.field == "page_size"
        assert requested < 0 or requested > MAX_PAGE_SIZE
        return
    assert 1 <= size <= MAX_PAGE_SIZE


def test_a_token_for_another_listing_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        decode_token(encode_token("q"), (int, str))
