"""Bulk actions: one verb (cancel, re-drive, purge) over the tasks a ``TaskFilter`` selects,
run by a server as a stored operation with progress (``server.ops.bulk_actions``).

An action reads the filter's listing a page at a time (``server.ops.task_search``) and acts
on each match with the verb's own operation, whose conditions (a cancel only of a scheduled
task, a re-drive and a purge only of a dead letter) make acting twice on a task impossible:
the second try finds it moved on and counts it skipped. After each page the action stores
where the listing goes on (``cursor``) with its counts, under a compare-and-set on
``version``, so another server resumes it from there if the one running it stops.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, replace
from typing import Any

from tikk.label_selectors import parse_selector
from tikk.model import TaskState
from tikk.task_filters import TaskFilter


class BulkVerb(enum.IntEnum):
    """What an action does to each match (values as ``tikk.v1.BulkVerb``)."""

    CANCEL = 1
    REDRIVE = 2
    PURGE = 3
    # Not of tasks: count the namespace's unfinished tasks and set its usage to that.
    RECOUNT = 4

    @property
    def acts_on(self) -> TaskState:
        """The state a task must be in for the verb to act on it (a recount counts every
        unfinished task; scheduled stands for them)."""
        return (
            TaskState.DEAD_LETTERED
            if self in (BulkVerb.REDRIVE, BulkVerb.PURGE)
            else (TaskState.SCHEDULED)
        )


class BulkState(enum.IntEnum):
    """Where an action stands (values as ``tikk.v1.BulkActionState``)."""

    RUNNING = 1
    SUCCEEDED = 2
    STOPPED = 3
    FAILED = 4


@dataclass(frozen=True)
class BulkProgress:
    """What an action has done so far (``tikk.v1.BulkAction`` says what each count means)."""

    read: int = 0
    matched: int = 0
    acted: int = 0
    skipped: int = 0
    failed: int = 0
    error: str = ""

    def plus(self, other: BulkProgress) -> BulkProgress:
        return BulkProgress(
            self.read + other.read, self.matched + other.matched, self.acted + other.acted,
            self.skipped + other.skipped, self.failed + other.failed,
            other.error or self.error,
        )  # fmt: skip


@dataclass(frozen=True)
class BulkAction:
    """One stored action. ``owner`` is the server process running it until
    ``lease_until_ms``; after that any server may take it over."""

    namespace: str
    action_id: str
    verb: BulkVerb
    filter: TaskFilter
    created_ms: int
    updated_ms: int
    state: BulkState = BulkState.RUNNING
    version: int = 1
    cursor: str = ""
    progress: BulkProgress = field(default_factory=BulkProgress)
    owner: str = ""
    lease_until_ms: int = 0
    finished_ms: int | None = None

    def next_version(self, **changes: Any) -> BulkAction:
        """This action with ``changes``, one version on (what a compare-and-set writes)."""
        return replace(self, version=self.version + 1, **changes)


def encode_action(a: BulkAction) -> str:
    """The stored body of ``a`` (JSON; every field but the key, version and state)."""
    f = a.filter
    return json.dumps({
        "verb": int(a.verb), "created_ms": a.created_ms, "updated_ms": a.updated_ms,
        "cursor": a.cursor, "owner": a.owner, "lease_until_ms": a.lease_until_ms,
        "finished_ms": a.finished_ms, "progress": vars(a.progress),
        "filter": {
            "queue": f.queue, "labels": str(f.labels) if f.labels else "",
            "state": int(f.state) if f.state else 0, "due_from_ms": f.due_from_ms,
            "due_until_ms": f.due_until_ms, "changed_from_ms": f.changed_from_ms,
            "changed_until_ms": f.changed_until_ms, "error_type": f.error_type,
        },
    }, separators=(",", ":"))  # fmt: skip


def decode_action(
    namespace: str, action_id: str, version: int, state: int, body: str
) -> BulkAction:
    """The action a stored row holds (``encode_action``'s inverse)."""
    d = json.loads(body)
    f = d["filter"]
    labels = parse_selector(f["labels"], bounded=False) if f["labels"] else None
    flt = TaskFilter(
        namespace, f["queue"], labels, TaskState(f["state"]) if f["state"] else None,
        f["due_from_ms"], f["due_until_ms"], f["changed_from_ms"], f["changed_until_ms"],
        f["error_type"],
    )  # fmt: skip
    return BulkAction(
        namespace, action_id, BulkVerb(d["verb"]), flt, d["created_ms"], d["updated_ms"],
        BulkState(state), version, d["cursor"], BulkProgress(**d["progress"]), d["owner"],
        d["lease_until_ms"], d["finished_ms"],
    )  # fmt: skip
