"""CLI parsing and the worker import rule."""

from __future__ import annotations

import argparse

import pytest

from server.cli import load_worker, parse_duration_ms, parse_time_ms


def test_durations() -> None:
    assert parse_duration_ms("250ms") == 250
    assert parse_duration_ms("30s") == 30_000
    assert parse_duration_ms("1h30m") == 5_400_000
    assert parse_duration_ms("1.5s") == 1_500
    for bad in ("", "5", "5 s", "-1s", "1y"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration_ms(bad)


def test_times_default_to_utc() -> None:
    assert parse_time_ms("2030-01-01T00:00:00") == 1_893_456_000_000
    assert parse_time_ms("2030-01-01T01:00:00+01:00") == 1_893_456_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time_ms("tomorrow")


def test_worker_targets() -> None:
    assert load_worker("examples.demo_worker:worker").queues == ["demo"]
    for bad, message in [
        ("examples.demo_worker", "MODULE:ATTRIBUTE"),
        ("server.cli:main", "collides"),
        ("examples.demo_worker:greet", "not a worker_sdk.Worker"),
    ]:
        with pytest.raises(ImportError, match=message):
            load_worker(bad)
