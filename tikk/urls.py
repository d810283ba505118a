"""Backend URLs: ``scheme://rest``, e.g. ``sqlite:///var/lib/tikk/tikk.db``."""

from __future__ import annotations

from tikk.errors import InvalidArgument


def split_url(setting: str, url: str) -> tuple[str, str]:
    """(scheme, rest) of ``url``; ``setting`` names the option in the error."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme or not rest:
        raise InvalidArgument(setting, f"expected scheme://location, got {url!r}")
    return scheme, rest
