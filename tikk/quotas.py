"""What a namespace may use (its quotas) and what it uses now (its usage): domain values.

The quota store keeps them (``tikk.store.quotas``); the server applies them
(``server.ops.quotas``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from tikk.errors import InvalidArgument

# The longest retention a namespace may keep: ten years (of 366 days), the longest duration
# tikk accepts anywhere (``tikk.settings.MAX_DURATION_MS``). A longer one would only overflow
# where a cut-off instant is computed; Cassandra keeps nothing longer than 20 years anyway.
MAX_RETENTION_SECONDS = 10 * 366 * 86_400


@dataclass(frozen=True)
class NamespaceQuotas:
    """What one namespace may use; ``None`` means no quota of its own (the server-wide
    default applies, if the settings have one, else unlimited)."""

    tasks_per_second: int | None = None
    tasks_stored: int | None = None
    schedules: int | None = None
    import_streams: int | None = None
    # How long a finished task, and a run in the history, are kept (``server.ops.retention``).
    # None: as the store keeps them by itself (the embedded store: for ever; Cassandra: 30
    # days, by TTL).
    task_retention_seconds: int | None = None
    history_retention_seconds: int | None = None

    def over(self, defaults: NamespaceQuotas) -> NamespaceQuotas:
        """These quotas, with ``defaults`` filling the ones not set."""
        return NamespaceQuotas(
            **{
                f.name: getattr(self, f.name)
                if getattr(self, f.name) is not None
                else getattr(defaults, f.name)
                for f in fields(self)
            }
        )


QUOTA_NAMES = tuple(f.name for f in fields(NamespaceQuotas))
RETENTION_NAMES = ("task_retention_seconds", "history_retention_seconds")


def check_quota(name: str, value: int, field: str = "") -> int:
    """``value`` of the quota ``name`` if it is in range (not negative; a retention at most
    ``MAX_RETENTION_SECONDS``), else ``InvalidArgument`` naming ``field`` (default: the name)."""
    if value < 0:
        raise InvalidArgument(field or name, "must not be negative")
    if name in RETENTION_NAMES and value > MAX_RETENTION_SECONDS:
        raise InvalidArgument(
            field or name, f"at most {MAX_RETENTION_SECONDS:,} s (ten years), got {value:,}"
        )
    return value


def kept_seconds(retention_s: int | None) -> int | None:
    """A stored retention as it is applied: within ``MAX_RETENTION_SECONDS`` (one stored
    before the bound, or written around the API, is read as the longest)."""
    return None if retention_s is None else max(0, min(retention_s, MAX_RETENTION_SECONDS))


@dataclass(frozen=True)
class NamespaceUsage:
    """What a namespace uses now, as the store counts it."""

    tasks_stored: int = 0
