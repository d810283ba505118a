from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from tikk.backoff import base_delay_ms, retry_delay_ms
from tikk.model import RetryPolicy


def test_base_delay_grows_exponentially_and_caps() -> None:
    p = RetryPolicy(max_attempts=10, initial_backoff_ms=100, multiplier=2.0, max_backoff_ms=1000)
    assert [base_delay_ms(p, n) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]


def test_no_jitter_is_exact() -> None:
    p = RetryPolicy(initial_backoff_ms=500, multiplier=3.0, max_backoff_ms=10_000, jitter=0.0)
    assert retry_delay_ms(p, 2, random.Random(1)) == 1500


def test_full_jitter_spreads_over_the_whole_range() -> None:
    p = RetryPolicy(initial_backoff_ms=1000, multiplier=1.0, max_backoff_ms=1000, jitter=1.0)
    rng = random.Random(7)
    delays = [retry_delay_ms(p, 1, rng) for _ in range(2000)]
    assert min(delays) < 100 and max(delays) > 900
    assert 400 < sum(delays) / len(delays) < 600


@given(
    initial=st.integers(0, 60_000),
    multiplier=st.floats(1.0, 100.0),
    cap=st.integers(0, 3_600_000),
    jitter=st.floats(0.0, 1.0),
    attempt=st.integers(1, 1000),
    seed=st.integers(0, 2**32),
)
def test_jittered_delay_stays_within_bounds(
    initial: int, multiplier: float, cap: int, jitter: float, attempt: int, seed: int
) -> None:
    p = RetryPolicy(1000, initial, multiplier, max(cap, initial), jitter)
    base = base_delay_ms(p, attempt)
    delay = retry_delay_ms(p, attempt, random.Random(seed))
    assert base * (1 - jitter) - 1 <= delay <= base
