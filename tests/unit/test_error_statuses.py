"""Every error of the tree (``tikk.errors``, and its subclasses wherever they are defined) is
drawn in the tree's docstring and answers with one status, the one the map gives its class
first: no class falls through to INTERNAL, and no entry of the map is shadowed by an entry
for its parent before it."""

from __future__ import annotations

import importlib
import re

import grpc

from server.api.status import _CODES, code_of
from tests.source_tree import PACKAGED, module_name, sources
from tikk import errors
from tikk.errors import TikkError


def every_error() -> list[type[TikkError]]:
    """Every public subclass of ``TikkError`` the installed packages define."""
    for path in sources(PACKAGED):
        if path.name != "__main__.py":  # runs a program when imported
            importlib.import_module(module_name(path))
    found, stack = [], [TikkError]
    while stack:
        kind = stack.pop()
        found.append(kind)
        stack.extend(kind.__subclasses__())
    return sorted({k for k in found if not k.__name__.startswith("_")}, key=lambda k: k.__name__)


def test_every_error_is_drawn_in_the_tree() -> None:
    tree = errors.__doc__ or ""
    drawn = set(re.findall(r"(?:├──|└──|^ +)\s*(\w+)", tree, re.MULTILINE))
    assert [k.__name__ for k in every_error() if k.__name__ not in drawn] == []


def test_every_error_has_a_status_of_its_own_family() -> None:
    unmapped = [k.__name__ for k in every_error() if k is not TikkError and _status(k) is None]
    assert unmapped == []


def test_no_entry_of_the_map_is_shadowed_by_its_parents_entry() -> None:
    shadowed = [
        f"{later.__name__} after {earlier.__name__}"
        for i, (earlier, _) in enumerate(_CODES)
        for later, _ in _CODES[i + 1 :]
        if issubclass(later, earlier)
    ]
    assert shadowed == []


def test_a_class_takes_its_own_entry_over_its_parents() -> None:
    from tikk.delivery_tokens import TokenRefused, UnknownDeliveryKey

    assert _status(UnknownDeliveryKey) is grpc.StatusCode.UNAVAILABLE
    assert _status(TokenRefused) is grpc.StatusCode.PERMISSION_DENIED


def _status(kind: type[TikkError]) -> grpc.StatusCode | None:
    """The status an instance of ``kind`` gets, None if it falls through to INTERNAL."""
    instance = kind.__new__(kind)
    code = code_of(instance)
    return None if code is grpc.StatusCode.INTERNAL else code
