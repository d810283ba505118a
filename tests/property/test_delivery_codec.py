"""The delivery codec (``tikk.delivery_codec``): a delivery survives the trip through the ready
queue unchanged, and whatever a worker sends back in its place (any ``Delivery`` message, any
bytes) becomes a delivery or ``InvalidArgument``, never another exception."""

from __future__ import annotations

import contextlib

from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from devtools.fuzz.messages import message
from tikk import delivery_codec
from tikk.buckets import shard_of
from tikk.errors import InvalidArgument
from tikk.model import Delivery, DueEntry
from tikk.schedules.model import schedule_of
from tikk.v1 import worker_pb2

SHARDS = 64
# Times a Timestamp can hold, in ms: 0001-01-01 .. 9999-12-31.
_MS = st.integers(-62_135_596_800_000, 253_402_300_799_999)
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
_INT32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def deliveries(draw: st.DrawFn) -> Delivery:
    task_id = draw(st.one_of(_TEXT, st.builds(lambda s, n: f"{s}@{n}", _TEXT, st.integers(0))))
    namespace = draw(_TEXT)
    entry = DueEntry(
        shard=shard_of(namespace, schedule_of(task_id) or task_id, SHARDS),
        due_ms=draw(_MS), namespace=namespace, task_id=task_id, attempt=draw(_INT32),
        queue=draw(_TEXT), handler=draw(_TEXT), payload=draw(st.binary(max_size=64)),
        labels=draw(st.dictionaries(_TEXT, _TEXT, max_size=3)), max_attempts=draw(_INT32),
        scheduled_ms=draw(_MS), schedule_id=schedule_of(task_id),
        start_timeout_ms=draw(st.integers(0, 315_576_000_000_000)),
    )  # fmt: skip
    trace = draw(st.dictionaries(_TEXT, _TEXT, max_size=2))
    return Delivery(entry, draw(_MS), trace)


def _wire(delivery: Delivery) -> Delivery:
    return delivery_codec.from_proto(
        worker_pb2.Delivery.FromString(delivery_codec.encode_delivery(delivery)), SHARDS
    )


@given(deliveries())
def test_a_delivery_round_trips(delivery: Delivery) -> None:
    back = _wire(delivery)
    assert back.entry == delivery.entry
    assert back.fired_ms == delivery.fired_ms
    assert dict(back.trace_context) == dict(delivery.trace_context)


@given(message(worker_pb2.Delivery.DESCRIPTOR))  # type: ignore[arg-type]
@example(worker_pb2.Delivery(due_time={"seconds": 0, "nanos": -1}))
@example(worker_pb2.Delivery(fired_time={"seconds": 2**62}))
@example(worker_pb2.Delivery(scheduled_time={"seconds": -(2**62)}))
@example(worker_pb2.Delivery(start_timeout={"seconds": 10**15}))
@example(worker_pb2.Delivery(start_timeout={"seconds": 1, "nanos": -5}))
def test_any_delivery_message_decodes_or_is_refused(msg: worker_pb2.Delivery) -> None:
    try:
        delivery = delivery_codec.from_proto(msg, SHARDS)
    except InvalidArgument as exc:
        assert exc.field.startswith("delivery.")
        return
    assert 0 <= delivery.entry.shard < SHARDS
    assert delivery.entry.task_id == msg.task_id


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_fail_as_a_decode_error(raw: bytes) -> None:
    try:
        msg = worker_pb2.Delivery.FromString(raw)
    except DecodeError:
        return
    with contextlib.suppress(InvalidArgument):
        delivery_codec.from_proto(msg, SHARDS)
