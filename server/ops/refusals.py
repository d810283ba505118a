"""When a worker's result is refused: the rules the result recorder applies before it writes.

Only the current attempt of a dispatched task takes a result. The due time tells occurrences
apart (a re-driven task counts attempts from 1 again, a moved one keeps its attempt), so an
attempt is named by its number and due time together.
"""

from __future__ import annotations

from tikk.errors import FailedPrecondition
from tikk.model import DueEntry, Task, TaskState


class ResultRefused(FailedPrecondition):
    """A result for a task that is not dispatched at the reported attempt. ``reason``:
    ``not_dispatched`` (the task is not running that attempt: not yet dispatched, cancelled,
    finished, or gone) or ``stale_attempt`` (the task has moved on to another attempt)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class StartTooLate(FailedPrecondition):
    """A worker asked to start an attempt whose start timeout ran out: it was dead-lettered,
    and the worker must not run it."""

    def __init__(self) -> None:
        super().__init__("the attempt's start timeout ran out: it was dead-lettered; do not run it")


def same_attempt(task: Task, e: DueEntry) -> bool:
    """Whether ``task`` stands at the attempt ``e`` names."""
    return (task.attempt, task.due_ms) == (e.attempt, e.due_ms)


def dispatched_at(task: Task, e: DueEntry) -> bool:
    """Whether ``task`` is running the attempt ``e`` names."""
    return task.state is TaskState.DISPATCHED and same_attempt(task, e)


def refuse_unless_dispatched(task: Task, e: DueEntry) -> None:
    """Raise ``ResultRefused`` unless ``task`` is running the attempt ``e``."""
    if not same_attempt(task, e):
        raise ResultRefused(
            "stale_attempt",
            f"attempt {e.attempt} due at {e.due_ms} of task {e.task_id!r} is not its current "
            f"attempt ({task.attempt} due at {task.due_ms}, {task.state.name})",
        )
    if task.state is not TaskState.DISPATCHED:
        raise ResultRefused(
            "not_dispatched",
            f"task {e.task_id!r} is not dispatched at attempt {e.attempt} ({task.state.name})",
        )
