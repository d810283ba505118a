"""Which tasks an operator means: a filter over a namespace's tasks, as the bulk verbs, the
count and the label listing take it (``server.ops.task_search`` reads what it selects).

Every term is optional but the namespace; a filter is read through one of the store's
listings (a label, a queue, or the dead letters), so it must name at least one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tikk.label_selectors import LabelSelector
from tikk.model import Task, TaskState


@dataclass(frozen=True)
class TaskFilter:
    """The tasks of ``namespace`` for which every given term holds.

    ``due_*`` bound the task's due time and ``changed_*`` the time it last changed state
    (for a dead letter, when it failed for the last time), each as [from, until).
    ``error_type`` is the type of the task's last error."""

    namespace: str
    queue: str = ""
    labels: LabelSelector | None = None
    state: TaskState | None = None
    due_from_ms: int | None = None
    due_until_ms: int | None = None
    changed_from_ms: int | None = None
    changed_until_ms: int | None = None
    error_type: str = ""

    def matches(self, task: Task) -> bool:
        return (
            task.namespace == self.namespace
            and (not self.queue or task.queue == self.queue)
            and (self.labels is None or self.labels.matches(task.labels))
            and (self.state is None or task.state is self.state)
            and _within(task.due_ms, self.due_from_ms, self.due_until_ms)
            and _within(task.updated_ms, self.changed_from_ms, self.changed_until_ms)
            and (not self.error_type or task.last_error_type == self.error_type)
        )

    def describe(self) -> str:
        """The filter in a line, as the CLI would write it."""
        terms = [f"namespace={self.namespace}"]
        terms += [f"queue={self.queue}"] if self.queue else []
        terms += [f"labels={self.labels}"] if self.labels else []
        terms += [f"state={self.state.name.lower()}"] if self.state else []
        terms += [f"error_type={self.error_type}"] if self.error_type else []
        spans = [
            ("due", self.due_from_ms, self.due_until_ms),
            ("changed", self.changed_from_ms, self.changed_until_ms),
        ]
        for name, low, high in spans:
            if low is not None or high is not None:
                terms.append(f"{name} in [{low or '-'}, {high or '-'})")
        return " ".join(terms)


def _within(value: int, low: int | None, high: int | None) -> bool:
    return (low is None or value >= low) and (high is None or value < high)
