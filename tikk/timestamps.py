"""Conversions between our integer milliseconds and protobuf Timestamp / Duration."""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp


def to_timestamp(ms: int) -> Timestamp:
    ts = Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def from_timestamp(ts: Timestamp) -> int:
    return int(ts.ToMilliseconds())


def to_duration(ms: int) -> Duration:
    d = Duration()
    d.FromMilliseconds(ms)
    return d


def from_duration(d: Duration) -> int:
    return int(d.ToMilliseconds())
