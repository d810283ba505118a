"""The workloads every system runs, and the due times of their tasks.

A to C fire: tasks due from a lead time on, spread evenly at a rate or all at one instant.
D holds: tasks due tomorrow, to measure the memory of a system holding them (nothing fires).
"""

from __future__ import annotations

from dataclasses import dataclass

from devtools.bench_load import Spread

DAY_MS = 86_400_000
# Tasks due tomorrow are spread at this rate, so they are not all due at one instant.
HELD_RATE = 1_000.0


@dataclass(frozen=True)
class Workload:
    """``tasks`` due over ``seconds`` (0: at one instant); ``held``: due tomorrow instead."""

    name: str
    tasks: int
    seconds: float
    held: bool = False

    @property
    def rate(self) -> float:
        """Tasks due per second; 0 when all are due at one instant."""
        if self.held:
            return HELD_RATE
        return self.tasks / self.seconds if self.seconds else 0.0

    def describe(self) -> str:
        if self.held:
            return f"{self.tasks:,} tasks due tomorrow (memory while holding them)"
        if not self.seconds:
            return f"{self.tasks:,} tasks due at one instant"
        return f"{self.tasks:,} tasks due over {self.seconds:g} s ({self.rate:,.0f}/s)"

    def scaled(self, scale: float) -> Workload:
        """The same workload with ``scale`` times the tasks (at least one) over the same span."""
        return Workload(self.name, max(1, round(self.tasks * scale)), self.seconds, self.held)


WORKLOADS = {
    "A": Workload("A", 10_000, 10.0),
    "B": Workload("B", 20_000, 10.0),
    "C": Workload("C", 10_000, 0.0),
    "D": Workload("D", 50_000, 0.0, held=True),
}


@dataclass(frozen=True)
class TaskPlan:
    """The tasks of one run: ids ``<prefix><i>`` for i < ``tasks``, due as ``spread`` says."""

    prefix: str
    tasks: int
    spread: Spread

    def task_id(self, index: int) -> str:
        return f"{self.prefix}{index}"

    def due_ms(self, index: int) -> int:
        return self.spread.due_ms(index)

    @property
    def last_due_ms(self) -> int:
        return self.due_ms(max(0, self.tasks - 1))


def plan_for(workload: Workload, prefix: str, now_ms: int, lead_ms: int) -> TaskPlan:
    """The tasks of ``workload``: the first due ``lead_ms`` after ``now_ms``, or tomorrow."""
    first = now_ms + (DAY_MS if workload.held else lead_ms)
    return TaskPlan(prefix, workload.tasks, Spread(first, workload.rate))
