"""Opaque page tokens: URL-safe base64 of a small JSON list, validated on the way back in."""

from __future__ import annotations

import base64
import binascii
import json

from tikk.errors import InvalidArgument

MAX_PAGE_SIZE = 1000
DEFAULT_PAGE_SIZE = 100
# Token parts go back to the stores as query values: integers must fit their 64-bit columns.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


def encode_token(*parts: int | str) -> str:
    raw = json.dumps(list(parts), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, shape: tuple[type, ...]) -> list[int | str] | None:
    """The parts of ``token`` (None for an empty token); ``InvalidArgument`` if malformed."""
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        parts = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError) as exc:
        # RecursionError: JSON nested deeper than the decoder follows.
        raise InvalidArgument("page_token", "malformed page token") from exc
    if not isinstance(parts, list) or len(parts) != len(shape):
        raise InvalidArgument("page_token", "malformed page token")
    if not all(type(p) is t and _storable(p) for p, t in zip(parts, shape, strict=True)):
        raise InvalidArgument("page_token", "malformed page token")
    return parts


def _storable(part: object) -> bool:
    """Whether a store can take ``part`` as a query value: JSON allows integers of any size
    and strings with lone surrogates (``"\\ud800"``), which no driver can send."""
    if isinstance(part, int):
        return _INT_MIN <= part <= _INT_MAX
    return not isinstance(part, str) or part.isascii() or _is_utf8(part)


def _is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def page_size(
    requested: int, maximum: int = MAX_PAGE_SIZE, default: int = DEFAULT_PAGE_SIZE
) -> int:
    """0 → the default; otherwise 1..``maximum``, refused outside (never trimmed)."""
    if requested == 0:
        return min(default, maximum)
    if requested < 0 or requested > maximum:
        raise InvalidArgument("page_size", f"must be between 1 and {maximum} (max_page_size)")
    return requested
