"""Bulk actions (``tikk.bulk_actions``): previewed, started, followed, stopped, and run.
A recount of a namespace's usage runs the same way, a few parts of the task rows a step
(``QuotaStore.count_open``), setting the usage when the last part is counted.

Every server runs the actions it finds RUNNING whose lease is its own or has run out
(``run``), one at a time, a page of matches after another: it acts on a page's tasks a few
at a time through ``TaskOps`` (each verb's own conditions decide what is acted on), then
stores the page's counts and the listing's next token with a longer lease, under the
action's version. A write refused there means someone else changed the action (a stop, or a
server that took it over when the lease ran out): this server lets it go. A server that dies
mid-page leaves the last stored token: whoever resumes reads that page again and finds the
tasks it acted on moved on (counted skipped), so no task is acted on twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from server.ops.task_search import Count, TaskSearch
from tikk.bulk_actions import BulkAction, BulkProgress, BulkState, BulkVerb
from tikk.clock import Clock
from tikk.errors import (
    BackendUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    TikkError,
)
from tikk.model import Page, Task
from tikk.quotas import NamespaceUsage
from tikk.store.bulk_actions import BulkActionStore
from tikk.store.quotas import QuotaStore
from tikk.task_filters import TaskFilter

log = logging.getLogger("tikk.bulk")
# Cancels a bulk cancel asks of the store in one call (one transaction on SQLite).
_CANCELS_PER_CALL = 100


@dataclass(frozen=True)
class BulkSettings:
    """How a server runs bulk actions."""

    # Tasks of the listing read per page (and per stored step).
    page_size: int = 500
    # Tasks of a page acted on at once.
    concurrency: int = 16
    # How long an action stays this server's after its last stored step.
    lease_ms: int = 30_000
    # How often a server looks for actions to run or resume.
    poll_s: float = 2.0


class _Outcome(enum.Enum):
    ACTED = "acted"
    SKIPPED = "skipped"
    FAILED = "failed"


# What became of each task of a page, with the reason of a failure.
_Outcomes = list[tuple[_Outcome, str]]


class TaskVerbs(Protocol):
    """What a bulk action does to tasks (``server.ops.tasks.TaskOps``)."""

    async def cancel_many(
        self, namespace: str, task_ids: Sequence[str]
    ) -> list[Task | TikkError]: ...

    async def redrive(self, namespace: str, task_id: str) -> Task: ...

    async def purge(self, namespace: str, task_id: str) -> Task: ...

    async def get(self, namespace: str, task_id: str) -> Task: ...


class BulkActions:
    """The bulk actions of every namespace as one server process runs them."""

    def __init__(
        self, store: BulkActionStore, search: TaskSearch, tasks: TaskVerbs, clock: Clock, *,
        quotas: QuotaStore, owner: str, settings: BulkSettings | None = None,
    ) -> None:  # fmt: skip
        self._store = store
        self._quotas = quotas
        self._search = search
        self._tasks = tasks
        self._clock = clock
        self._owner = owner
        self._settings = settings or BulkSettings()
        self._wake = asyncio.Event()

    async def preview(self, verb: BulkVerb, f: TaskFilter) -> Count:
        """A dry run: how many tasks the verb would act on, and the first few."""
        return await self._search.count(for_verb(verb, f))

    async def start(self, verb: BulkVerb, f: TaskFilter, action_id: str) -> BulkAction:
        """Store a new action (or find the one stored under ``action_id``) and wake the
        runner; returns it as stored. A recount's filter is its namespace alone."""
        wanted = for_verb(verb, f)
        if verb is not BulkVerb.RECOUNT:
            self._search.check(wanted)
        now = self._clock.now_ms()
        chosen = action_id or f"{now:013d}-{os.urandom(4).hex()}"
        new = BulkAction(f.namespace, chosen, verb, wanted, now, now)
        action, created = await self._store.create(new)
        if created:
            log.info("bulk %s %s started: %s", verb.name.lower(), chosen, new.filter.describe())
            self._wake.set()
        return action

    async def get(self, namespace: str, action_id: str) -> BulkAction:
        return await self._store.get(namespace, action_id)

    async def list(self, namespace: str, size: int, token: str) -> Page[BulkAction]:
        return await self._store.list(namespace, size, token)

    async def stop(self, namespace: str, action_id: str) -> BulkAction:
        """Stop an action after the task it is at (a no-op on one that ended)."""
        while True:
            action = await self._store.get(namespace, action_id)
            if action.state is not BulkState.RUNNING:
                return action
            now = self._clock.now_ms()
            stopped = action.next_version(state=BulkState.STOPPED, updated_ms=now, finished_ms=now)
            if await self._store.replace(stopped):
                return stopped

    async def run(self) -> None:
        """Run and resume actions until cancelled (a task of the serving process)."""
        while True:
            self._wake.clear()  # before the look: a start during it wakes the next one
            try:
                await self.run_due()
            except BackendUnavailable as exc:
                log.warning("bulk actions: %s; trying again", exc)
            except Exception:  # a bug must not stop every later action of this server
                log.exception("bulk actions: unexpected failure; trying again")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._settings.poll_s)

    async def run_due(self) -> None:
        """Drive every action that is this server's to run now, each until it ends or is
        taken from it."""
        for action in await self._store.running(64):
            mine = action.owner == self._owner
            if mine or action.lease_until_ms <= self._clock.now_ms():
                await self._drive(action)

    async def _drive(self, action: BulkAction) -> None:
        claimed = self._step(action, action.cursor, BulkProgress(), finished=False)
        if not await self._store.replace(claimed):
            return  # another server took it first, or it was stopped
        action = claimed
        while True:
            try:
                done, cursor = await self._next(action)
            except InvalidArgument as exc:  # a filter or token no listing takes any more
                await self._store.replace(self._failed(action, str(exc)))
                return
            following = self._step(action, cursor, done, finished=not cursor)
            if not following.cursor and action.verb is BulkVerb.RECOUNT:
                usage = NamespaceUsage(tasks_stored=following.progress.matched)
                await self._quotas.put_usage(action.namespace, usage)
            if not await self._store.replace(following):
                return  # stopped, or taken over after this server's lease ran out
            action = following
            if action.state is not BulkState.RUNNING:
                log.info("bulk %s ended %s", action.action_id, action.progress)
                return

    async def _next(self, action: BulkAction) -> tuple[BulkProgress, str]:
        """The action's next step: what it did, and where the one after starts ("": none)."""
        if action.verb is BulkVerb.RECOUNT:
            counted = await self._quotas.count_open(action.namespace, int(action.cursor or 0))
            found, after = counted.open_tasks, counted.next_part
            return BulkProgress(counted.read, found, found), "" if after < 0 else str(after)
        size = self._settings.page_size
        page, read = await self._search.page(action.filter, size, action.cursor)
        done = await self._act_on(action.verb, page.items)
        return replace(done, read=read, matched=len(page.items)), page.next_token

    def _step(
        self, action: BulkAction, cursor: str, done: BulkProgress, *, finished: bool
    ) -> BulkAction:
        """``action`` one step on: ``done`` added, going on from ``cursor`` (or ended), this
        server's for another lease."""
        now = self._clock.now_ms()
        return action.next_version(
            cursor=cursor, progress=action.progress.plus(done), owner=self._owner,
            lease_until_ms=now + self._settings.lease_ms, updated_ms=now,
            state=BulkState.SUCCEEDED if finished else BulkState.RUNNING,
            finished_ms=now if finished else None,
        )  # fmt: skip

    async def _act_on(self, verb: BulkVerb, tasks: Sequence[Task]) -> BulkProgress:
        """Act on ``tasks``: cancels a hundred at a time in one store call, the other verbs
        a few tasks at a time; what became of them."""
        if verb is BulkVerb.CANCEL:
            outcomes = await self._cancel_all(tasks)
        else:
            gate = asyncio.Semaphore(self._settings.concurrency)

            async def one(task: Task) -> tuple[_Outcome, str]:
                async with gate:
                    return await self._act(verb, task)

            outcomes = [*await asyncio.gather(*(one(t) for t in tasks))]
        reasons = [r for o, r in outcomes if o is _Outcome.FAILED]
        return BulkProgress(
            acted=sum(o is _Outcome.ACTED for o, _ in outcomes),
            skipped=sum(o is _Outcome.SKIPPED for o, _ in outcomes),
            failed=len(reasons), error=reasons[-1] if reasons else "",
        )  # fmt: skip

    async def _cancel_all(self, tasks: Sequence[Task]) -> _Outcomes:
        outcomes: _Outcomes = []
        for at in range(0, len(tasks), _CANCELS_PER_CALL):
            part = tasks[at : at + _CANCELS_PER_CALL]
            began = self._clock.now_ms()
            done = await self._tasks.cancel_many(part[0].namespace, [t.task_id for t in part])
            for task, outcome in zip(part, done, strict=True):
                outcomes.append(await self._outcome(BulkVerb.CANCEL, task, outcome, began))
        return outcomes

    async def _act(self, verb: BulkVerb, task: Task) -> tuple[_Outcome, str]:
        """Re-drive or purge one task. A store that fails raises: the page is read and
        acted on again later."""
        began = self._clock.now_ms()
        act = self._tasks.redrive if verb is BulkVerb.REDRIVE else self._tasks.purge
        try:
            done: Task | TikkError = await act(task.namespace, task.task_id)
        except (NotFound, FailedPrecondition) as exc:
            done = exc
        return await self._outcome(verb, task, done, began)

    async def _outcome(
        self, verb: BulkVerb, task: Task, done: Task | TikkError, began: int
    ) -> tuple[_Outcome, str]:
        """What the verb did to one task: acted on (a cancel answered with a cancel made
        before ``began`` was someone else's: skipped), skipped (gone, or moved on), or
        failed (refused, with why)."""
        if isinstance(done, Task):
            mine = verb is not BulkVerb.CANCEL or done.updated_ms >= began
            return (_Outcome.ACTED if mine else _Outcome.SKIPPED), ""
        if isinstance(done, NotFound):
            return _Outcome.SKIPPED, ""
        if isinstance(done, FailedPrecondition):
            return await self._refused(verb, task, done)
        return _Outcome.FAILED, str(done)  # a cancel the store may not have settled

    async def _refused(self, verb: BulkVerb, task: Task, exc: TikkError) -> tuple[_Outcome, str]:
        """A refusal of a task that moved on is a skip; of one still in the verb's state
        (a cancel too close to its due time), a failure."""
        try:
            now = await self._tasks.get(task.namespace, task.task_id)
        except NotFound:
            return _Outcome.SKIPPED, ""
        return (_Outcome.FAILED, str(exc)) if now.state is verb.acts_on else (_Outcome.SKIPPED, "")

    def _failed(self, action: BulkAction, error: str) -> BulkAction:
        now = self._clock.now_ms()
        return action.next_version(
            state=BulkState.FAILED, updated_ms=now, finished_ms=now,
            progress=replace(action.progress, error=error),
        )  # fmt: skip


def runner_id() -> str:
    """This process among the servers that run bulk actions: host, pid and a random part
    (a restarted process is another runner; its old lease runs out)."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def for_verb(verb: BulkVerb, f: TaskFilter) -> TaskFilter:
    """``f`` in the state ``verb`` acts on; ``InvalidArgument`` if it names another."""
    if verb is BulkVerb.RECOUNT:
        return TaskFilter(f.namespace)
    if f.state is not None and f.state is not verb.acts_on:
        raise InvalidArgument(
            "filter.state", f"{verb.name.lower()} acts on {verb.acts_on.name.lower()} tasks, "
            f"not {f.state.name.lower()} ones",
        )  # fmt: skip
    return replace(f, state=verb.acts_on)
