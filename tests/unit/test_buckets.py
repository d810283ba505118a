from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from tikk.buckets import minute_of_second, minutes_between, second_of, shard_of


def test_shard_is_stable_across_processes() -> None:
    # Python's hash() is salted per process; our shard must not be.
    code = "from tikk.buckets import shard_of; print(shard_of('default', 'task-42', 256))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(3)
    }
    assert outputs == {str(shard_of("default", "task-42", 256))}


def test_shard_depends_on_namespace_and_spreads() -> None:
    shards = {shard_of("default", f"t{i}", 256) for i in range(5000)}
    assert len(shards) == 256
    assert any(shard_of("a", f"t{i}", 256) != shard_of("b", f"t{i}", 256) for i in range(10))


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_second_and_minute_contain_the_instant(ms: int) -> None:
    sec = second_of(ms)
    assert sec * 1000 <= ms < (sec + 1) * 1000
    minute = minute_of_second(sec)
    assert minute * 60 <= sec < (minute + 1) * 60


def test_minutes_between_covers_both_ends() -> None:
    assert list(minutes_between(59, 60)) == [0, 1]
    assert list(minutes_between(120, 179)) == [2]
