"""Hypothesis profiles of the property and fuzz tests.

``ci`` (chosen when ``CI`` is set, as ``make test`` does): a bounded number of examples, no
per-example deadline (a shared CI machine makes timings noise), a fixed seed so a red run
repeats. ``dev`` (default): the same without the fixed seed. ``long``: many examples, for a
manual hunt: ``HYPOTHESIS_PROFILE=long pytest tests/property``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, suppress_health_check=_SLOW_OK
)
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("long", max_examples=5_000, deadline=None, suppress_health_check=_SLOW_OK)


def _profile() -> str:
    if chosen := os.environ.get("HYPOTHESIS_PROFILE"):
        return chosen
    ci = os.environ.get("CI", "").lower()
    return "ci" if ci not in ("", "0", "false") else "dev"


settings.load_profile(_profile())
