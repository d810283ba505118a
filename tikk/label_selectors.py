"""Label selectors: ``team=a,region!=eu`` picks the tasks whose labels have ``team`` equal to
``a`` and ``region`` absent or not ``eu`` (the syntax of Kubernetes' equality selectors).

A selector is found through the label index (``TaskStore.list_by_label``) by its first
``key=value`` term; the other terms are checked on each task the index gives. A selector
needs at least one ``key=value`` term, so that it never reads more than the tasks of one
label. Terms are separated by ``,``, so a value holding a comma cannot be selected; spaces
around keys and values are not part of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tikk.errors import InvalidArgument

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,62}")
_FIELD = "label_selector"
# A selector is stored whole with a bulk action and shown in every listing of them, so it is
# bounded: room for a dozen long terms, far more than a selector that means something.
MAX_SELECTOR_LENGTH = 2_048
MAX_SELECTOR_TERMS = 16


@dataclass(frozen=True)
class LabelTerm:
    """``key=value``, or with ``equal`` False ``key!=value``."""

    key: str
    value: str
    equal: bool = True

    def holds(self, labels: Mapping[str, str]) -> bool:
        return (labels.get(self.key) == self.value) is self.equal

    def __str__(self) -> str:
        return f"{self.key}{'=' if self.equal else '!='}{self.value}"


@dataclass(frozen=True)
class LabelSelector:
    """Terms that must all hold; ``indexed`` is the term the label index is read by."""

    terms: tuple[LabelTerm, ...]

    @property
    def indexed(self) -> LabelTerm:
        return next(t for t in self.terms if t.equal)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(t.holds(labels) for t in self.terms)

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)


def parse_selector(text: str, *, bounded: bool = True) -> LabelSelector:
    """The selector ``text`` writes; ``InvalidArgument`` naming what is wrong with it (at
    most ``MAX_SELECTOR_LENGTH`` characters and ``MAX_SELECTOR_TERMS`` terms, unless not
    ``bounded``: a selector stored before the bounds is still read)."""
    if bounded and len(text) > MAX_SELECTOR_LENGTH:
        raise InvalidArgument(
            _FIELD, f"{len(text):,} characters; a selector holds at most {MAX_SELECTOR_LENGTH:,}"
        )
    parts = text.split(",")
    if bounded and len(parts) > MAX_SELECTOR_TERMS:
        raise InvalidArgument(
            _FIELD, f"{len(parts)} terms; a selector holds at most {MAX_SELECTOR_TERMS}"
        )
    terms = tuple(_term(part) for part in parts)
    if not any(t.equal for t in terms):
        raise InvalidArgument(_FIELD, f"{text!r} needs at least one key=value term")
    return LabelSelector(terms)


def _term(part: str) -> LabelTerm:
    key, not_equal, value = part.partition("!=")
    if not not_equal:
        key, equal, value = part.partition("=")
        if not equal:
            raise InvalidArgument(_FIELD, f"term {part.strip()!r} is not key=value or key!=value")
    key, value = key.strip(), value.strip()
    if not _KEY.fullmatch(key):
        raise InvalidArgument(
            _FIELD, f"label key {key!r} must be 1-63 of A-Z a-z 0-9 . _ / - starting alphanumeric"
        )
    return LabelTerm(key, value, equal=not not_equal)
