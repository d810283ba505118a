"""Calls the client repeats when the server is unavailable: which (``safe_to_repeat``) and
how often and how long apart (``CallRetries``).

Only a call that failed with UNAVAILABLE is repeated: the server restarting, a connection
refused or reset, a store behind the server that did not answer. No other code is, not even
DEADLINE_EXCEEDED (the call's time is spent) nor any answer the server gave on purpose. And
only a call that is safe to repeat, because an UNAVAILABLE call may have taken effect before
its answer was lost:

- every read: the ``Get*`` calls, each page of every listing, ``CountTasks``,
  ``PreviewSchedule``, ``GetNamespaceQuotas``, and a bulk action's dry run (it acts on
  nothing and stores nothing);
- creates under an id the client chose: ``CreateTask`` with a ``task_id`` and
  ``CreateSchedule`` with a schedule id (the server stores an identical one once and answers
  a resend with it, ``created`` False), the bulk actions and ``RecountUsage`` with an
  ``action_id`` (the same id again returns the same action);
- changes that leave the same state however often they arrive: ``CancelTask`` (cancelling a
  cancelled task is a no-op), ``StopBulkAction`` (a no-op on an action that ended),
  ``UpdateQueue`` and ``SetNamespaceQuotas`` (absolute settings), ``BackfillSchedule`` (an
  occurrence's task id is fixed by its nominal time: one that exists is counted, not created
  again; the counts answered are those of the last attempt).

Never repeated: a create without an id of the client's (a resend would create a second
task, schedule or action), ``TriggerSchedule`` (each call fires an occurrence),
``RescheduleTask`` (a delay counts from when the server reads it), ``RedriveTask`` (a task
that failed again meanwhile would be re-driven twice), ``PurgeDeadLetter``,
``DeleteSchedule``, ``UpdateSchedule``, ``PauseSchedule`` and ``ResumeSchedule`` (a resend
after a lost answer fails, or moves the version again), ``RecountNamespaceUsage`` (a repair
that reads every task: not one to repeat on a backend that is struggling), and the
``ImportTasks`` stream, which ``ImportInterrupted`` lets the caller resume.

A client given several servers (``tikk.client.server_list``) sends a repeat to another one:
round robin passes over a server whose connection was lost (or, through the channel's pings,
one that hangs). Which calls are repeated stays the same: a server that died after taking a
create without an id may have stored it, and another server would store it again.

The waits grow exponentially with full jitter (each a uniform draw below its ceiling), and
the whole call, waits included, stays within its timeout: a wait that would end past it is
not begun, and the last UNAVAILABLE is raised. Time is injected (``sleep``, ``async_sleep``,
``clock``, ``uniform``), so tests need not wait. grpc only, as the rest of the client.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import grpc

R = TypeVar("R")

# Method names whose every request is safe to send again (see the module).
REPEATED_ALWAYS = frozenset({
    # reads
    "GetTask", "ListTasks", "ListQueues", "GetRun", "ListTaskRuns", "ListRuns",
    "ListDeadLetters", "ListScheduleOccurrences", "CountTasks", "GetBulkAction",
    "ListBulkActions", "GetSchedule", "ListSchedules", "PreviewSchedule", "GetNamespaceQuotas",
    # the same state however often they arrive
    "CancelTask", "StopBulkAction", "UpdateQueue", "SetNamespaceQuotas", "BackfillSchedule",
})  # fmt: skip


def _has_action_id_or_dry_run(request: Any) -> bool:
    return bool(request.dry_run or request.action_id)


# Method names safe to send again only when their request carries an id of the client's.
REPEATED_WITH_ID: Mapping[str, Callable[[Any], bool]] = {
    "CreateTask": lambda request: bool(request.task_id),
    "CreateSchedule": lambda request: bool(request.schedule.id),
    "BulkCancelTasks": _has_action_id_or_dry_run,
    "BulkRedriveTasks": _has_action_id_or_dry_run,
    "BulkPurgeTasks": _has_action_id_or_dry_run,
    "RecountUsage": lambda request: bool(request.action_id),
}
# Method names never sent again by the client (see the module for why each).
NEVER_REPEATED = frozenset({
    "CreateTasks", "ImportTasks", "RescheduleTask", "RedriveTask", "PurgeDeadLetter",
    "TriggerSchedule", "UpdateSchedule", "DeleteSchedule", "PauseSchedule", "ResumeSchedule",
    "RecountNamespaceUsage",
})  # fmt: skip


def safe_to_repeat(method: str, request: Any) -> bool:
    """Whether the client may send ``method`` with ``request`` again after UNAVAILABLE."""
    if method in REPEATED_ALWAYS:
        return True
    rule = REPEATED_WITH_ID.get(method)
    return rule is not None and rule(request)


@dataclass(frozen=True)
class CallRetries:
    """How the client repeats a call that is safe to repeat (``safe_to_repeat``) after it
    failed with UNAVAILABLE: at most ``attempts`` sends in all (1: never repeated), the
    n-th wait below ``min(max_backoff_s, initial_backoff_s * multiplier ** (n - 1))``, drawn
    uniformly below that ceiling (``jitter="full"``) or the ceiling itself (``"none"``).

    The time of a test: ``sleep`` and ``async_sleep`` wait, ``clock`` reads monotonic
    seconds (against the call's timeout), ``uniform`` draws a number in [0, 1).
    """

    attempts: int = 5
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    jitter: Literal["full", "none"] = "full"
    sleep: Callable[[float], object] = field(default=time.sleep, repr=False, compare=False)
    async_sleep: Callable[[float], Awaitable[object]] = field(
        default=asyncio.sleep, repr=False, compare=False
    )
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    uniform: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts counts the first send too: at least 1")
        if not 0 <= self.initial_backoff_s <= self.max_backoff_s:
            raise ValueError("backoffs: 0 <= initial_backoff_s <= max_backoff_s")
        if self.multiplier < 1:
            raise ValueError("multiplier: at least 1")
        if self.jitter not in ("full", "none"):
            raise ValueError(f"jitter: 'full' or 'none', not {self.jitter!r}")

    def backoff(self, retry: int) -> float:
        """The wait in seconds before repeat number ``retry`` (1 for the first repeat)."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (retry - 1))
        return ceiling * self.uniform() if self.jitter == "full" else ceiling

    def run(self, send: Callable[[float | None], R], budget_s: float | None) -> R:
        """``send(seconds left)``, repeated as the policy says within ``budget_s`` (the
        call's timeout; None: no bound but ``attempts``); raises the last error."""
        attempts = _Attempts(self, budget_s)
        while True:
            try:
                return send(attempts.time_left())
            except grpc.RpcError as exc:
                wait = attempts.wait_after(exc)
                if wait is None:
                    raise
            self.sleep(wait)

    async def run_async(
        self, send: Callable[[float | None], Awaitable[R]], budget_s: float | None
    ) -> R:
        """``run`` of an asyncio call."""
        attempts = _Attempts(self, budget_s)
        while True:
            try:
                return await send(attempts.time_left())
            except grpc.RpcError as exc:
                wait = attempts.wait_after(exc)
                if wait is None:
                    raise
            await self.async_sleep(wait)


DEFAULT_CALL_RETRIES = CallRetries()
NO_CALL_RETRIES = CallRetries(attempts=1)


class _Attempts:
    """The attempts of one call: how many were made, and its deadline (None: none)."""

    def __init__(self, policy: CallRetries, budget_s: float | None) -> None:
        self._policy = policy
        self._deadline = None if budget_s is None else policy.clock() + budget_s
        self._made = 0

    def time_left(self) -> float | None:
        """The timeout of the next attempt: what is left of the call's."""
        if self._deadline is None:
            return None
        return max(self._deadline - self._policy.clock(), 0.0)

    def wait_after(self, exc: grpc.RpcError) -> float | None:
        """The seconds to wait before the next attempt after ``exc``; None to give up."""
        self._made += 1
        code = getattr(exc, "code", lambda: None)()
        if code is not grpc.StatusCode.UNAVAILABLE or self._made >= self._policy.attempts:
            return None
        wait = self._policy.backoff(self._made)
        if self._deadline is not None and self._policy.clock() + wait >= self._deadline:
            return None
        return wait
