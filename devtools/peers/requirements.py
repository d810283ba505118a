"""What each system needs beyond tikk, and the one step that installs what is missing.

Only the systems asked for are checked, so ``--systems tikk`` needs nothing more.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable, Sequence

SYSTEMS = ("tikk", "celery", "arq", "apscheduler", "redis-poller")
# The Python packages (import names) of each system; all come with the ``peers`` extra.
PACKAGES = {
    "tikk": (),
    "celery": ("celery", "redis"),
    "arq": ("arq", "redis"),
    "apscheduler": ("apscheduler", "sqlalchemy"),
    "redis-poller": ("redis",),
}
USES_REDIS_SERVER = frozenset({"celery", "arq", "redis-poller"})
PIP_STEP = "pip install -e '.[peers]'  (the tikk[peers] extra)"
APT_STEP = "apt-get install redis-server"


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def missing_requirements(
    systems: Sequence[str],
    which: Callable[[str], str | None] = shutil.which,
    installed: Callable[[str], bool] = _installed,
) -> list[str]:
    """One line per missing piece of ``systems``: what is missing, and how to install it.
    Empty when everything is there."""
    lines = []
    packages = sorted({p for s in systems for p in PACKAGES[s] if not installed(p)})
    if packages:
        lines.append(f"Python packages not installed: {', '.join(packages)}: {PIP_STEP}")
    if USES_REDIS_SERVER.intersection(systems) and which("redis-server") is None:
        lines.append(f"redis-server not found: {APT_STEP}")
    return lines


def unknown_systems(systems: Sequence[str]) -> list[str]:
    return [s for s in systems if s not in SYSTEMS]
