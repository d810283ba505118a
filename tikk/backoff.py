"""Retry delays: exponential backoff with (full) jitter."""

from __future__ import annotations

import random

from tikk.model import RetryPolicy


def base_delay_ms(policy: RetryPolicy, failed_attempt: int) -> int:
    """The un-jittered delay after attempt ``failed_attempt`` (1-based) failed."""
    exponent = max(0, failed_attempt - 1)
    try:
        delay = policy.initial_backoff_ms * policy.multiplier**exponent
    except OverflowError:  # e.g. x100 after attempt 999: far beyond any cap
        return policy.max_backoff_ms
    return int(min(delay, policy.max_backoff_ms))


def retry_delay_ms(policy: RetryPolicy, failed_attempt: int, rng: random.Random) -> int:
    """The delay before the next attempt: the jittered share is drawn uniformly from [0, it].

    With ``jitter == 1`` this is "full jitter" (uniform over [0, base]), which spreads a herd of
    tasks that failed together instead of retrying them in lock step.
    """
    base = base_delay_ms(policy, failed_attempt)
    jittered = base * policy.jitter
    return int(base - jittered + rng.uniform(0.0, jittered))
