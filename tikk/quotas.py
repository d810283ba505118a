"""What a namespace may use (its quotas) and what it uses now (its usage): domain values.

The quota store keeps them (``tikk.store.quotas``); the server applies them
(``server.ops.quotas``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


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


@dataclass(frozen=True)
class NamespaceUsage:
    """What a namespace uses now, as the store counts it."""

    tasks_stored: int = 0
