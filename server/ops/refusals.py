"""When a worker's result is refused: the rules the result recorder applies before it writes.

Only the current attempt of a dispatched task takes a result. The due time tells occurrences
apart (a re-driven task counts attempts from 1 again, a moved one keeps its attempt), so an
attempt is named by its number and due time together. Once an attempt has ended, what its
delivery still brings (a repeat, a duplicate delivery's run) is taken for a grace period only
(``refuse_if_expired``), and a bounded number of further runs (``too_many_runs``).
"""

from __future__ import annotations

from tikk.delivery_tokens import expired_token
from tikk.errors import FailedPrecondition
from tikk.model import DueEntry, Task, TaskState


class ResultRefused(FailedPrecondition):
    """A result for a task that is not dispatched at the reported attempt. ``reason``:
    ``not_dispatched`` (the task is not running that attempt: not yet dispatched, cancelled,
    finished, or gone), ``not_cancelled`` (a report that the run stopped for a cancel, of a
    task not cancelled while it ran), ``stale_attempt`` (the task has moved on to another
    attempt) or
    ``too_many_runs`` (another run of an attempt that succeeded, which has recorded as many
    further runs as it may: ``Limits.max_extra_runs``)."""

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


def cancelled_running(task: Task, e: DueEntry) -> bool:
    """Whether ``task`` was cancelled while it ran the attempt ``e`` names (``Abandon``), as
    opposed to cancelled before any run of it."""
    return task.cancelled_running(e.attempt, e.due_ms)


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


def refuse_if_expired(ended_ms: int, now_ms: int, grace_ms: int) -> None:
    """Raise ``TokenRefused`` (``token_expired``) if the attempt a result is for ended (at
    ``ended_ms``, the server's time) more than ``grace_ms`` before ``now_ms``. Only for an
    attempt that ended: a running one takes its result however long it ran."""
    if now_ms - ended_ms > grace_ms:
        raise expired_token(
            f"its attempt ended {(now_ms - ended_ms) // 1000:,} s ago, and a token is taken for "
            f"{grace_ms // 1000:,} s after its attempt ends"
        )


def too_many_runs(e: DueEntry, most: int) -> ResultRefused:
    """The refusal of one more run of attempt ``e``, which succeeded and has ``most`` further
    runs recorded."""
    return ResultRefused(
        "too_many_runs",
        f"attempt {e.attempt} of task {e.task_id!r} succeeded and has recorded {most} further "
        "runs, as many as an attempt may: nothing more is recorded for it",
    )
