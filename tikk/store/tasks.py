"""The task store interface: tasks by id, the due index, and per-shard dispatch cursors.

The due index is partitioned by (shard, minute of due time) and clustered by (second, task
key); an entry carries everything needed to publish it. Backends: ``tikk.store.sqlite.tasks``
(embedded) and ``tikk.store.cassandra.tasks``. Every method may raise ``BackendUnavailable``
when the backend cannot be reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from tikk.clock import Clock
from tikk.errors import FailedPrecondition, StaleOwner, TikkError
from tikk.model import Claimed, Cursor, DueEntry, Page, Task, TaskState, Transition

# Column order of the task table and of a due-index read, shared by the SQLite and Cassandra
# backends so that a field added to the model is added to both in one place.
TASK_COLUMNS = (
    "namespace", "task_id", "queue", "handler", "payload", "labels", "max_attempts",
    "initial_backoff_ms", "multiplier", "max_backoff_ms", "jitter", "state", "attempt", "due_ms",
    "scheduled_ms", "created_ms", "updated_ms", "shard", "fingerprint", "last_error_type",
    "last_error_message", "trace_context", "schedule_id", "start_timeout_ms",
    "execution_timeout_ms",
)  # fmt: skip
DUE_COLUMNS = (
    "shard", "due_ms", "namespace", "task_id", "attempt", "queue", "handler", "payload",
    "labels", "max_attempts", "scheduled_ms", "trace_context", "schedule_id", "start_timeout_ms",
    "execution_timeout_ms",
)  # fmt: skip
# Written to a due-index row: its key columns, then what a read returns.
DUE_WRITE_COLUMNS = ("minute", "second", "task_key", *DUE_COLUMNS)
# What a due-index read returns: the written columns, then the due time of the delivery the
# queue accepted (``mark_handed_off``), which marks the row handed off while it equals due_ms.
# A row written again into the same second keeps a stale value there, so it reads as not
# handed off; that is why the mark is a due time and not a flag.
DUE_READ_COLUMNS = (*DUE_COLUMNS, "handed_off_ms")


class TaskStore(Protocol):
    """Durable home of tasks. Safe to share between coroutines of one event loop."""

    @property
    def shard_count(self) -> int:
        """Number of shards of this deployment; fixed once tasks exist."""
        ...

    async def check_shard_count(self) -> None:
        """Record ``shard_count`` with the data if none is recorded yet; raise
        ``FailedPrecondition`` naming both numbers if the data was created with another (a
        process started with a different count would strand tasks in shards nobody reads)."""
        ...

    async def create(self, task: Task) -> tuple[Task, bool]:
        """Store a new task and its due-index row together; neither is visible without the other.

        Idempotent: if a task with the same (namespace, id) and the same ``fingerprint`` exists,
        returns it with ``False``. Returns the stored task with ``True`` otherwise.
        Raises ``AlreadyExists`` if the id is taken by a task with another fingerprint.
        """
        ...

    async def create_many(
        self, tasks: Sequence[Task], *, new_ids: bool = False
    ) -> list[tuple[Task, bool] | TikkError]:
        """``create`` for each task, in order, with one outcome per task (never dropping one).

        Per-task failures (``AlreadyExists``) are returned in place; a backend failure raises.
        ``new_ids``: the caller guarantees every id is fresh (assigned by the server), so a
        backend may skip the existence check that idempotent creation needs.
        """
        ...

    async def get(self, namespace: str, task_id: str) -> Task:
        """The task; raises ``NotFound``."""
        ...

    async def cancel(self, namespace: str, task_id: str, clock: Clock) -> Task:
        """Cancel a SCHEDULED task so it never fires; idempotent on a CANCELLED task.

        Raises ``NotFound``, or ``FailedPrecondition`` for a dispatched or finished task.
        Where a cancel cannot be atomic with a dispatcher claiming the task, it is refused
        (``FailedPrecondition``) once the task is due within a fence of the time, so that a
        cancel that returned OK is never followed by a run: on Cassandra the fence is
        ``cancel_fence_ms`` (2 s by default); SQLite cancels up to the claim itself.
        ``clock`` is read when the check is made and again once the write is acknowledged,
        not when the call began: a store that answers slowly must not let a cancel through
        on a time that has passed. A write acknowledged inside the fence raises
        ``CancelUnsettled`` (the task may run once), and so does every later cancel of it.
        """
        ...

    async def cancel_many(
        self, namespace: str, task_ids: Sequence[str], clock: Clock
    ) -> list[Task | TikkError]:
        """``cancel`` of each task, one outcome each in order (``NotFound``,
        ``FailedPrecondition`` or ``CancelUnsettled`` in its place); written together where
        the backend can (one transaction on SQLite). A backend failure raises."""
        ...

    async def list_tasks(
        self, namespace: str, queue: str, state: TaskState | None, page_size: int, page_token: str
    ) -> Page[Task]:
        """Tasks of a queue (optionally in one state), each exactly once across the pages, in
        an order of the backend's choosing; ``page_token`` from a previous page or empty.
        Raises ``InvalidArgument`` for a malformed token."""
        ...

    async def list_by_label(
        self, namespace: str, label: tuple[str, str], page_size: int, page_token: str
    ) -> Page[Task]:
        """Tasks of the namespace whose label ``label[0]`` is ``label[1]``, read through an
        index of the labels (never a scan of the namespace), each once across the pages, in
        an order of the backend's choosing. A page may hold fewer than ``page_size`` tasks
        (none, even) and a next token; the listing ends only without a token. Raises
        ``InvalidArgument`` for a malformed token."""
        ...

    async def count_by_label(
        self, namespace: str, label: tuple[str, str], state: TaskState | None, most: int
    ) -> tuple[int, bool]:
        """How many tasks ``list_by_label`` would list (those in ``state`` only, if given),
        counting at most ``most``; and whether that was all of them."""
        ...

    async def list_dead_letters(
        self, namespace: str, queue: str, page_size: int, page_token: str, now_ms: int
    ) -> Page[Task]:
        """Dead-lettered tasks, newest first; ``queue`` empty means every queue. ``now_ms``
        bounds the search (backends may keep dead letters in time buckets)."""
        ...

    async def read_due(
        self,
        shard: int,
        after: tuple[int, str],
        until_second: int,
        limit: int,
        *,
        unsent_only: bool = False,
    ) -> list[DueEntry]:
        """Due-index rows of ``shard`` with position (second, key) > ``after`` and second <=
        ``until_second``, in position order, at most ``limit``. Reads only the minute buckets
        in that range; cost depends on what is due, not on how much is stored. With
        ``unsent_only``, rows marked handed off are left out (and take no place under the
        limit): a dispatcher reading its recent seconds again looks only for rows it has not
        sent, and most of those it already did.

        May return rows of tasks that were since cancelled or moved; ``mark_dispatched`` filters.
        """
        ...

    async def mark_dispatched(self, entries: Sequence[DueEntry], now_ms: int) -> Claimed:
        """Move each entry's task to DISPATCHED and return the entries that may be published:
        those whose task is still at that attempt and due time and is SCHEDULED or already
        DISPATCHED (re-publishing after a crash is allowed: at-least-once; those are counted
        in ``resent``). Cancelled, finished or rescheduled tasks are left out; so are tasks
        whose create has not finished (listed in ``unfinished``, to be read again). For an
        entry with a start timeout, its ``start_deadline`` row is written before this returns.
        A claim never overwrites a state written after the task was read.
        """
        ...

    async def claim_start(self, entry: DueEntry, now_ms: int) -> bool:
        """A worker is about to start the attempt ``entry`` (task, attempt and due time) of a
        task that has a start timeout: record that it started, unless its deadline got there
        first. True if it may run (also when an earlier delivery of the attempt started it:
        a redelivery must run), False if the attempt expired. Linearizable with
        ``expire_start``: of a start and an expiry of one attempt, exactly one wins."""
        ...

    async def expire_start(self, entry: DueEntry, reason: str, now_ms: int) -> Task | None:
        """The start timeout of the attempt ``entry`` ran out: unless a worker started it,
        dead-letter it (error type ``StartTimeout``, message ``reason``) and return the
        dead-lettered task, also when this expiry was recorded before (repeating it is
        harmless). None if a worker started the attempt or the task has moved on (finished,
        retried, cancelled)."""
        ...

    async def mark_handed_off(self, entries: Sequence[DueEntry], now_ms: int) -> None:
        """Record that the queue accepted these rows' deliveries: a later ``read_due`` returns
        them with ``handed_off`` set, so a new owner does not send them again. A row written
        again (a retry into the same second) starts without the mark. Idempotent; a lost
        mark only costs a duplicate delivery."""
        ...

    async def finish_attempt(
        self, namespace: str, task_id: str, attempt: int, transition: Transition, now_ms: int
    ) -> Task | None:
        """Apply the outcome of a dispatched attempt: success, a retry (written into its
        future bucket with the task row, together) or a dead letter.

        Returns the updated task, or ``None`` when the report is stale (the task is not
        DISPATCHED at ``attempt``, e.g. a duplicate delivery). A store that writes a move's
        other rows (the retry's due row, the dead-letter listing) apart from the task row
        writes them again when ``attempt`` is the one that moved the task there, so a repeat
        completes a move its first report left half done. Raises ``NotFound``.
        """
        ...

    async def succeed_many(self, entries: Sequence[DueEntry], now_ms: int) -> list[bool]:
        """Record that each of these dispatched attempts succeeded, with one conditional write
        per task and no read (success is most of what workers report). A task moves to
        SUCCEEDED if it is still DISPATCHED at the entry's attempt and due time: True. A
        stale report (a duplicate, or the task moved on) changes nothing: False."""
        ...

    async def redrive(self, namespace: str, task_id: str, now_ms: int) -> Task:
        """Schedule a dead-lettered task again at ``now_ms`` with attempt 1 of a fresh
        occurrence. Raises ``NotFound`` or ``FailedPrecondition`` if not dead-lettered."""
        ...

    async def purge_dead_letter(self, namespace: str, task_id: str) -> Task:
        """Delete a dead-lettered task for good (its runs stay in the history until their
        retention); returns it as it was. Raises ``NotFound``, or ``FailedPrecondition`` if
        it is not dead-lettered (a re-drive racing the purge: one of the two wins whole)."""
        ...

    async def move_due(
        self, namespace: str, task_id: str, *, attempt: int, due_ms: int, to_ms: int, now_ms: int
    ) -> Task | None:
        """Move a SCHEDULED task's pending attempt from ``due_ms`` to the later ``to_ms`` (its
        due-index row with it), for a write that may have landed behind a cursor. Returns the
        moved task, or ``None`` if the task is no longer SCHEDULED at that attempt and due
        time (a dispatcher took it: nothing to move). A dispatcher racing the move may send
        the task twice, never not at all. Raises ``NotFound``."""
        ...

    async def reschedule(
        self, namespace: str, task_id: str, *, to_ms: int, payload: bytes | None, now_ms: int
    ) -> Task:
        """Move a SCHEDULED task's pending attempt to ``to_ms`` (earlier or later), with its
        payload replaced by ``payload`` unless that is None; the moved task. Raises
        ``NotFound``, and ``FailedPrecondition`` for a task not scheduled (dispatched,
        finished, cancelled, or taken by a dispatcher while it was moved). A crash part-way
        leaves the task firing at one of the two times, never at neither."""
        ...

    def keep_for(self, namespace: str, seconds: int | None) -> None:
        """Keep the namespace's tasks written from now on ``seconds`` past their due time
        (None: as the store keeps them by itself). A store whose rows expire by themselves
        (Cassandra) writes it as their TTL, at least a day; one that ``prune_finished``
        empties needs nothing here."""
        ...

    async def prune_finished(self, namespace: str, before_ms: int, most: int) -> int:
        """Delete up to ``most`` of the namespace's finished tasks (succeeded, dead-lettered,
        cancelled) that last changed before ``before_ms``, with their listing rows; how many
        were deleted. A store whose rows expire by themselves (Cassandra's TTL) deletes
        nothing here and returns 0."""
        ...

    async def get_cursors(self) -> dict[int, Cursor]:
        """Every shard's dispatch cursor that was ever written, in one read."""
        ...

    async def get_cursor(self, shard: int) -> Cursor:
        """The shard's dispatch cursor; a never-dispatched shard starts at second 0, epoch 0."""
        ...

    async def advance_cursors(self, moves: Mapping[int, Cursor]) -> set[int]:
        """Record, for each shard, that every row with second <= ``moves[shard].second`` was
        handed off, presenting that owner's epoch. Returns the shards refused because an owner
        with a larger epoch has written their cursor (fencing); the others are recorded. Never
        moves a cursor backwards. Rows at or before a cursor may be discarded.
        """
        ...

    async def ping(self) -> None:
        """Ask the backend the cheapest question that proves it answers now, as a readiness
        probe does (on Cassandra a one-row read at the configured consistency, so a quorum
        of the row's replicas must answer). Reads nothing of tasks, writes nothing;
        idempotent. Raises ``BackendUnavailable`` when it does not answer (the caller bounds
        the wait)."""
        ...

    async def start(self) -> None:
        """Open connections and files (nothing is opened by the constructor). A backend
        sharing a driver session with others starts it if none has yet."""
        ...

    async def close(self) -> None:
        """Release what ``start`` opened; idempotent."""
        ...


async def advance_cursor(store: TaskStore, shard: int, second: int, epoch: int) -> None:
    """``advance_cursors`` for one shard; raises ``StaleOwner`` if refused."""
    if await store.advance_cursors({shard: Cursor(second, epoch)}):
        raise StaleOwner(f"shard {shard}: epoch {epoch} is older than the owner's")


def require_scheduled(task: Task, verb: str) -> None:
    """Raise ``FailedPrecondition`` unless ``task`` is scheduled (what ``verb`` needs)."""
    if task.state is not TaskState.SCHEDULED:
        # A dispatched task is with its queue or worker (which holds one handed over before
        # its due time, the dispatcher's lead, until then): only stopping its run ends it.
        dispatched = task.state is TaskState.DISPATCHED
        hint = " (its worker has it; stop its run instead)" if dispatched else ""
        raise FailedPrecondition(
            f"task {task.task_id!r} is {task.state.name.lower()} and can no longer be {verb}{hint}"
        )


def require_dead_lettered(task: Task) -> None:
    """``FailedPrecondition`` naming its state unless ``task`` is dead-lettered: what a
    re-drive and a purge both demand, on every backend."""
    if task.state is not TaskState.DEAD_LETTERED:
        raise FailedPrecondition(
            f"task {task.task_id!r} is {task.state.name.lower()}, not dead-lettered"
        )


def check_shard_count(stored: int, configured: int) -> None:
    """Raise ``FailedPrecondition`` if the recorded shard count is not the configured one."""
    if stored != configured:
        raise FailedPrecondition(
            f"the task store was created with {stored} shards, but this process is configured "
            f"with {configured} (--shards {stored} is required)"
        )
