"""Typed task payloads: what a handler declares it takes, decoded from the bytes a task
carries, and what it returns (or a client sends), encoded into bytes.

The convention is JSON: a payload typed as a dataclass is a JSON object with the dataclass's
fields, checked field by field against their annotations (nested dataclasses, ``list``,
``tuple``, ``dict`` with string keys, ``Optional`` and other unions, ``Literal``, enums by
value, ``datetime`` and ``date`` as ISO 8601 text, and the JSON scalars). A pydantic model is
used through its own ``model_validate_json`` and ``model_dump_json``, so pydantic is never
imported here and stays optional. ``bytes`` (or ``Any``) passes unchanged, ``str`` is UTF-8 text, so
handlers that take raw bytes keep working.

A payload that does not fit its type raises ``PayloadInvalid``, naming the field and what was
wrong: repeating the run cannot help, so the worker fails it permanently.

Standard library only: the worker SDK and the client both import it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from datetime import date, datetime
from typing import Any


class PayloadInvalid(ValueError):
    """The payload does not decode into the type its handler declares."""


def encode_payload(value: object) -> bytes:
    """``value`` as payload bytes: bytes unchanged, text as UTF-8, None as no bytes, a pydantic
    model by its own JSON, anything else (a dataclass, a dict, a list, a number) as JSON.
    ``TypeError`` naming what cannot be encoded."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    dump = getattr(value, "model_dump_json", None)
    if callable(dump) and not isinstance(value, type):
        return str(dump()).encode()
    return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False).encode()


def decode_payload(data: bytes, target: Any) -> Any:
    """``data`` decoded into ``target`` (see the module); ``PayloadInvalid`` if it does not
    fit."""
    if target is bytes or target is Any:
        return data
    if target is str:
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise PayloadInvalid(f"payload is not UTF-8 text: {exc}") from None
    validate = getattr(target, "model_validate_json", None)
    if callable(validate):
        try:
            return validate(data or b"null")
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise PayloadInvalid(f"payload does not fit {target.__name__}: {exc}") from None
    try:
        value = json.loads(data) if data else None
    except ValueError as exc:
        raise PayloadInvalid(f"payload is not JSON: {exc}") from None
    return _convert(value, target, "payload")


def _plain(value: object) -> Any:
    """``value`` as JSON-ready data; ``TypeError`` for what JSON cannot carry."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return {_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"cannot encode a {type(value).__name__} as a JSON payload")


def _key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a JSON object's keys are text, not {type(key).__name__}")
    return key


def _convert(value: Any, target: Any, path: str) -> Any:
    """``value`` (parsed JSON) as ``target``, checked; ``PayloadInvalid`` naming ``path``."""
    if target is Any or target is object:
        return value
    origin = typing.get_origin(target)
    if origin is typing.Union or origin is types.UnionType:
        return _union(value, typing.get_args(target), path)
    if origin is typing.Literal:
        if value not in typing.get_args(target):
            raise _wrong(path, f"one of {list(typing.get_args(target))!r}", value)
        return value
    if origin in (list, tuple, set, frozenset, dict):
        return _container(value, origin, typing.get_args(target), path)
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        return _dataclass(value, target, path)
    return _scalar(value, target, path)


def _union(value: Any, options: tuple[Any, ...], path: str) -> Any:
    if value is None and type(None) in options:
        return None
    errors = []
    for option in (o for o in options if o is not type(None)):
        try:
            return _convert(value, option, path)
        except PayloadInvalid as exc:
            errors.append(str(exc))
    raise PayloadInvalid(" or ".join(errors) or _wrong(path, "null", value).args[0])


def _container(value: Any, origin: Any, args: tuple[Any, ...], path: str) -> Any:
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(path, "an object", value)
        item = args[1] if len(args) == 2 else Any
        return {k: _convert(v, item, f"{path}.{k}") for k, v in value.items()}
    if not isinstance(value, list):
        raise _wrong(path, "a list", value)
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            raise PayloadInvalid(f"{path}: expected {len(args)} items, got {len(value)}")
        pairs = enumerate(zip(value, args, strict=True))
        return tuple(_convert(v, a, f"{path}[{i}]") for i, (v, a) in pairs)
    item = args[0] if args else Any
    items = [_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    return items if origin is list else origin(items)


def _dataclass(value: Any, target: type, path: str) -> Any:
    if not isinstance(value, dict):
        raise _wrong(path, f"an object ({target.__name__})", value)
    hints, fields = _shape(target)
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise PayloadInvalid(f"{path}: unknown field(s) {', '.join(map(repr, unknown))}")
    missing = [
        name
        for name, f in fields.items()
        if name not in value
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise PayloadInvalid(f"{path}: missing field(s) {', '.join(map(repr, missing))}")
    kwargs = {k: _convert(v, hints.get(k, Any), f"{path}.{k}") for k, v in value.items()}
    return target(**kwargs)


@functools.cache
def _shape(target: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A dataclass's field types and init fields, read once per class (resolving the
    annotations is most of a small payload's decoding time)."""
    hints = typing.get_type_hints(target)
    return hints, {f.name: f for f in dataclasses.fields(target) if f.init}


def _scalar(value: Any, target: Any, path: str) -> Any:
    if isinstance(target, type) and issubclass(target, enum.Enum):
        try:
            return target(value)
        except ValueError:
            choices = [m.value for m in target]
            raise _wrong(path, f"one of {choices!r}", value) from None
    if target in (datetime, date):
        if not isinstance(value, str):
            raise _wrong(path, f"ISO 8601 {target.__name__} text", value)
        try:
            return target.fromisoformat(value)
        except ValueError:
            raise _wrong(path, f"ISO 8601 {target.__name__} text", value) from None
    if target is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if target in (int, float) and isinstance(value, bool):
        raise _wrong(path, target.__name__, value)
    if target is type(None) and value is None:
        return None
    if isinstance(target, type) and isinstance(value, target):
        return value
    raise _wrong(path, getattr(target, "__name__", repr(target)), value)


def _wrong(path: str, expected: str, value: Any) -> PayloadInvalid:
    got = "null" if value is None else type(value).__name__
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return PayloadInvalid(f"{path}: expected {expected}, got {got} {shown}")
