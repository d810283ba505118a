"""Hypothesis strategies for protobuf messages, derived from their descriptors.

Values aim at the edges a validator must hold: integers at the limits of their wire type,
NaN and infinities, strings with control characters, lone-surrogate-free but otherwise any
Unicode, huge strings and byte blobs (some over the server's message size limit), timestamps
and durations far outside what ``google.protobuf`` allows, unknown enum numbers. Fields whose
names say what they hold (``cron``, ``timezone``, ``page_token``, ids) also get values close
to valid ones, which reach deeper than random text.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from tikk.paging import encode_token

Strategy = st.SearchStrategy[Any]

_I32, _I64 = 2**31, 2**63
_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-_I32, _I32 - 1),
    FieldDescriptor.TYPE_SINT32: (-_I32, _I32 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-_I32, _I32 - 1),
    FieldDescriptor.TYPE_INT64: (-_I64, _I64 - 1),
    FieldDescriptor.TYPE_SINT64: (-_I64, _I64 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-_I64, _I64 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
# Deeper than any tikk message nests; a guard should a recursive message ever appear.
_MAX_DEPTH = 6
# Above the server's 4 MiB receive limit, so that limit is exercised too.
_HUGE = 5 * 1024 * 1024
# 0001-01-01 .. 9999-12-31 in seconds: the range google.protobuf.Timestamp allows.
_TS_MIN, _TS_MAX = -62_135_596_800, 253_402_300_799
_NOW_S = 1_790_000_000

_CHARACTERS = st.characters(exclude_categories=["Cs"])  # protobuf strings must be UTF-8
_TRICKY_TEXT = (
    "", " ", "\x00", "\t", "\n", "\x7f", "\u200b", "\ufeff", "\U0010ffff", "é", "日本",
    "default", "a", "a.b", "a_dlq", "q.dlq", "x@1", "x@schedule", "@", "..", "/", "%s",
    "-1", "0", "99999999999999999999", "null", "[]", "{}", "' OR 1=1 --", "a" * 300,
)  # fmt: skip
_CRON_PARTS = (
    "*", "*/5", "*/0", "0", "1-5", "5-1", "59", "60", "-1", "MON", "jan", "7", "0-7/2", "L",
    "?", "1,2,3", "*/999999999999", "2-2", "@", "#", "31", "2",
)  # fmt: skip
_MACROS = ("@yearly", "@monthly", "@weekly", "@daily", "@hourly", "@reboot", "@")
_ZONES = (
    "UTC", "Europe/Oslo", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu",
    "Pacific/Kiritimati", "Etc/GMT+12", "", "utc", "Nowhere/City", "../etc/passwd",
    "/etc/localtime", "UTC\x00", "Europe/Oslo/", " UTC", "Z", "+01:00",
)  # fmt: skip


def text() -> Strategy:
    """Any string a client could send: short random Unicode, known tricky ones, huge ones."""
    return st.one_of(
        st.text(_CHARACTERS, max_size=40),
        st.sampled_from(_TRICKY_TEXT),
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._@/-]{0,70}", fullmatch=True),
        st.builds(lambda c, n: c * n, _CHARACTERS, st.integers(0, _HUGE // 4)),
    )


def blob() -> Strategy:
    return st.one_of(
        st.binary(max_size=64), st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=4),
                                          st.integers(0, _HUGE)),
    )  # fmt: skip


def cron_text() -> Strategy:
    fields = st.lists(st.sampled_from(_CRON_PARTS), max_size=8).map(" ".join)
    return st.one_of(fields, st.sampled_from(_MACROS), text())


def zone_text() -> Strategy:
    return st.one_of(st.sampled_from(_ZONES), text())


def page_token() -> Strategy:
    """Tokens as the server makes them, then truncated, tampered with or made up."""
    part = st.one_of(st.integers(-(2**70), 2**70), text().filter(lambda s: len(s) < 1000))
    real = st.lists(part, max_size=4).map(lambda parts: encode_token(*parts))
    odd_json = st.sampled_from(['{"a":1}', "null", "[1e999]", "[NaN]", '"x"', "[[1]]", "[true]"])
    forged = odd_json.map(lambda raw: base64.urlsafe_b64encode(raw.encode()).decode())
    nested = st.integers(1, 20_000).map(lambda n: _b64("[" * n + "]" * n))
    return st.one_of(
        real,
        st.tuples(real, st.integers(0, 40)).map(lambda t: t[0][: t[1]]),
        st.tuples(real, st.integers(0, 40), _CHARACTERS).map(_tamper),
        forged,
        nested,
        text(),
    )


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _tamper(t: tuple[str, int, str]) -> str:
    token, at, char = t
    at = min(at, len(token))
    return token[:at] + char + token[at + 1 :]


def _version_text() -> Strategy:
    return st.one_of(st.integers(-(2**70), 2**70).map(str), text())


# What ``target.seed`` stores before a run, so that calls naming it reach past "not found":
# a task and a schedule in the default namespace, on one queue.
SEEDED_TASK, SEEDED_SCHEDULE, SEEDED_QUEUE, SEEDED_HANDLER = "fz-task", "fz-schedule", "fzq", "h"


def _or_seeded(*seeded: str) -> Callable[[], Strategy]:
    return lambda: st.one_of(st.sampled_from(seeded), text())


# Field names whose values deserve a closer-to-valid generator; anything else gets ``text``.
_NAMED_TEXT: dict[str, Callable[[], Strategy]] = {
    "cron": cron_text,
    "timezone": zone_text,
    "page_token": page_token,
    "expected_version": _version_text,
    "namespace": _or_seeded("", "default"),
    "task_id": _or_seeded(SEEDED_TASK, f"{SEEDED_SCHEDULE}@0"),
    "schedule_id": _or_seeded(SEEDED_SCHEDULE),
    "id": _or_seeded(SEEDED_SCHEDULE, SEEDED_TASK),
    "queue": _or_seeded(SEEDED_QUEUE),
    "handler": _or_seeded(SEEDED_HANDLER),
}


def _timestamp_like(cls: Any, nanos_max: int) -> Strategy:
    seconds = st.one_of(
        st.integers(-_I64, _I64 - 1),
        st.integers(_TS_MIN - 2, _TS_MAX + 2),
        st.integers(_NOW_S - 10**8, _NOW_S + 10**9),
        st.sampled_from([_TS_MIN, _TS_MAX, 0, -1, _NOW_S]),
    )
    nanos = st.one_of(st.integers(-_I32, _I32 - 1), st.integers(0, nanos_max))
    return st.builds(lambda s, n: cls(seconds=s, nanos=n), seconds, nanos)


def _scalar(field: FieldDescriptor) -> Strategy:
    t = field.type
    if t in _INT_RANGES:
        low, high = _INT_RANGES[t]
        return st.integers(low, high)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_FLOAT:
        return st.floats(width=32)
    if t == FieldDescriptor.TYPE_DOUBLE:
        return st.floats()
    if t == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-_I32, _I32 - 1))
    if t == FieldDescriptor.TYPE_BYTES:
        return blob()
    return _NAMED_TEXT.get(field.name, text)()


def _is_map(field: FieldDescriptor) -> bool:
    entry = field.message_type
    return entry is not None and bool(entry.GetOptions().map_entry)


def _message_type(field: FieldDescriptor) -> Descriptor:
    assert field.message_type is not None, f"{field.full_name} is not a message field"
    return field.message_type


def _value(field: FieldDescriptor, depth: int) -> Strategy:
    """A value for one (non-repeated) occurrence of ``field``."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message(_message_type(field), depth + 1)
    return _scalar(field)


def _field(field: FieldDescriptor, depth: int) -> Strategy:
    if _is_map(field):
        entry = _message_type(field)
        key = _value(entry.fields_by_name["key"], depth)
        value = _value(entry.fields_by_name["value"], depth)
        return st.one_of(
            st.dictionaries(key, value, max_size=4),
            st.integers(0, 200).map(lambda n: {f"k{i}": "v" for i in range(n)}),
        )
    if field.is_repeated:
        return st.lists(_value(field, depth), max_size=4)
    return _value(field, depth)


def message(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Messages of ``descriptor`` with any subset of their fields set to edge values."""
    cls = message_factory.GetMessageClass(descriptor)
    if descriptor.full_name == "google.protobuf.Timestamp":
        return _timestamp_like(cls, 999_999_999)
    if descriptor.full_name == "google.protobuf.Duration":
        return _timestamp_like(cls, 999_999_999)
    if depth >= _MAX_DEPTH:
        return st.just(cls())
    optional = {f.name: _field(f, depth) for f in descriptor.fields}
    return st.fixed_dictionaries({}, optional=optional).map(
        lambda values: _build(cls, descriptor, values)
    )


def _build(cls: type[Message], descriptor: Descriptor, values: dict[str, Any]) -> Message:
    msg = cls()
    for name, value in values.items():
        field = descriptor.fields_by_name[name]
        target = getattr(msg, name)
        if _is_map(field):
            _fill_map(field, target, value)
        elif field.is_repeated:
            target.extend(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg


def _fill_map(field: FieldDescriptor, target: Any, value: dict[Any, Any]) -> None:
    if _message_type(field).fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
        for k, v in value.items():
            target[k].CopyFrom(v)
    else:
        target.update(value)


def raw_bytes() -> st.SearchStrategy[bytes]:
    """Bytes that are mostly not a valid message: random, truncated varints, bad UTF-8, deep
    nesting of length-delimited fields."""
    deep = st.integers(1, 200).map(_nested_bytes)
    return st.one_of(
        st.binary(max_size=256),
        st.sampled_from([b"\x0a\xff\xff\xff\xff\x0f", b"\x0a\x02\xc3\x28", b"\x08", b"\xff"]),
        deep,
    )


def _nested_bytes(depth: int) -> bytes:
    """Field 1 as a length-delimited value holding field 1 again, ``depth`` times."""
    body = b""
    for _ in range(depth):
        body = b"\x0a" + _varint(len(body)) + body
    return body


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def serialized_requests(
    descriptor: Descriptor, streaming: bool, *, raw: bool = False
) -> st.SearchStrategy[list[bytes]]:
    """What one call sends: a few messages (or none) for a request stream, one otherwise;
    serialized messages of ``descriptor``, or with ``raw`` any bytes."""
    one = raw_bytes() if raw else message(descriptor).map(lambda m: m.SerializeToString())
    return st.lists(one, max_size=3) if streaming else st.lists(one, min_size=1, max_size=1)
