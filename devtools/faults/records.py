"""What a run of the fault suite records: the plan of each task, every client call, every
handler start, every fault window and the final states read back from the server.

All records are frozen; times are Unix milliseconds on the one machine the suite runs on, so
the client's, the workers' and the nemesis' clocks are the same clock.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

OK = "OK"
# The task that checks the cluster end to end before the run; not part of the history.
WARM_UP_ID = "warm-up"
# Codes after which a create or cancel may or may not have taken effect: retried as is.
INDETERMINATE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
# The Cassandra store refuses a cancel this close to the due time, and a cancel it wrote
# this close is acknowledged as unsettled (it may still run once).
CANCEL_FENCE_MS = 2_000


class TaskKind(StrEnum):
    """What a task of the workload is meant to do; the value is also its handler name."""

    OK = "ok"
    FAIL_ONCE = "fail_once"
    ALWAYS_FAIL = "always_fail"
    CANCEL = "cancel"
    # Cancelled with the others of its batch by one bulk action (a label selector).
    BULK_CANCEL = "bulk_cancel"

    @property
    def handler(self) -> str:
        """The worker handler: a task to be cancelled runs the plain handler if it escapes."""
        return "ok" if self in (TaskKind.CANCEL, TaskKind.BULK_CANCEL) else self.value


class FaultKind(StrEnum):
    KILL_SERVER = "kill server"
    KILL_DISPATCHER = "kill dispatcher"
    KILL_WORKER = "kill worker"
    PAUSE_DISPATCHER = "pause dispatcher"
    STOP_KAFKA = "stop kafka"
    STOP_CASSANDRA = "stop cassandra"
    # An operator pauses the workload's queue, then resumes it (``tikk queues pause``).
    PAUSE_QUEUE = "pause queue"
    # One node of the replicated stack (``devtools.faults.nodes``): killed with -9 and
    # started again, or stopped (SIGSTOP) and continued. The Kafka broker killed leads a
    # partition of the workload's topic, the ZooKeeper server killed leads the ensemble.
    KILL_CASSANDRA_NODE = "kill cassandra node"
    STOP_CASSANDRA_NODE = "stop cassandra node"
    KILL_KAFKA_LEADER = "kill kafka leader"
    STOP_KAFKA_BROKER = "stop kafka broker"
    KILL_ZOOKEEPER_LEADER = "kill zookeeper leader"
    # Every packet to and from one node's loopback address dropped (iptables), then let
    # through again: the node runs on, cut off from clients and peers alike.
    PARTITION_NODE = "partition node"
    # A rolling restart (``devtools.faults.rolling``): one node or one tikk process sent
    # SIGTERM and started again, and a schema step applied to the live keyspace.
    RESTART_NODE = "restart node"
    RESTART_PROCESS = "restart process"
    MIGRATE_SCHEMA = "migrate schema"

    @property
    def is_kill(self) -> bool:
        """Whether a tikk process is killed (and started again)."""
        return self in (FaultKind.KILL_SERVER, FaultKind.KILL_DISPATCHER, FaultKind.KILL_WORKER)

    @property
    def is_node_fault(self) -> bool:
        """Whether one node of the replicated stack's services is hit."""
        return self in NODE_FAULTS


NODE_FAULTS = frozenset(
    {
        FaultKind.KILL_CASSANDRA_NODE,
        FaultKind.STOP_CASSANDRA_NODE,
        FaultKind.KILL_KAFKA_LEADER,
        FaultKind.STOP_KAFKA_BROKER,
        FaultKind.KILL_ZOOKEEPER_LEADER,
        FaultKind.PARTITION_NODE,
    }
)
ROLLING_STEPS = frozenset(
    {FaultKind.RESTART_NODE, FaultKind.RESTART_PROCESS, FaultKind.MIGRATE_SCHEMA}
)
# What hits the one-node stack (every kind of fault but the node faults).
ONE_NODE_FAULTS = tuple(k for k in FaultKind if k not in NODE_FAULTS | ROLLING_STEPS)


@dataclass(frozen=True)
class TaskPlan:
    """One task the workload will create: when to create it, when it is due (the ``run_at``
    sent, fixed across retries of the create) and, for a cancelled one, when to cancel it."""

    task_id: str
    kind: TaskKind
    create_at_ms: int
    due_ms: int
    due_now: bool
    cancel_at_ms: int | None = None
    # The label value (``batch=...``) a bulk cancel selects a BULK_CANCEL task by.
    batch: str = ""


@dataclass(frozen=True)
class Call:
    """One RPC: when it was sent, when it returned, and its status code name."""

    requested_ms: int
    responded_ms: int
    code: str


@dataclass(frozen=True)
class CreateRecord:
    """Every call made to create one task (retries of an indeterminate outcome included)."""

    task_id: str
    kind: TaskKind
    due_ms: int
    due_now: bool
    max_attempts: int
    calls: tuple[Call, ...]

    @property
    def outcome(self) -> str:
        """The code of the last call; ``NOT_SENT`` if the run ended before the first."""
        return self.calls[-1].code if self.calls else "NOT_SENT"

    @property
    def accepted(self) -> bool:
        """Only a create that finally returned OK counts as accepted."""
        return self.outcome == OK

    @property
    def retried(self) -> bool:
        return len(self.calls) > 1


@dataclass(frozen=True)
class CancelRecord:
    """Every call made to cancel one task."""

    task_id: str
    calls: tuple[Call, ...]

    @property
    def outcome(self) -> str:
        return self.calls[-1].code if self.calls else "NOT_SENT"

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    @property
    def indeterminate(self) -> bool:
        return self.outcome in INDETERMINATE


@dataclass(frozen=True)
class BulkCancelRecord:
    """Every call made to start one bulk cancel of a batch (the same action id each time, so
    a repeat starts nothing twice). What it cancelled is read from the tasks' final states:
    an action reports counts, not which task it took."""

    batch: str
    task_ids: tuple[str, ...]
    calls: tuple[Call, ...]

    @property
    def outcome(self) -> str:
        return self.calls[-1].code if self.calls else "NOT_SENT"


@dataclass(frozen=True)
class Start:
    """One handler start, as the worker logged it."""

    task_id: str
    attempt: int
    key: str
    due_ms: int
    fired_ms: int
    started_ms: int
    worker: str

    @property
    def run(self) -> tuple[str, int]:
        """The (task, attempt) this start belongs to."""
        return (self.task_id, self.attempt)

    def to_json(self) -> str:
        return json.dumps(
            {
                "task_id": self.task_id,
                "attempt": self.attempt,
                "key": self.key,
                "due_ms": self.due_ms,
                "fired_ms": self.fired_ms,
                "started_ms": self.started_ms,
                "worker": self.worker,
            }
        )


def parse_start(line: str) -> Start | None:
    """A logged start, or ``None`` for a line that is not one (a ``kill -9`` can cut the
    last line of a worker short)."""
    try:
        d = json.loads(line)
        return Start(
            task_id=str(d["task_id"]),
            attempt=int(d["attempt"]),
            key=str(d["key"]),
            due_ms=int(d["due_ms"]),
            fired_ms=int(d["fired_ms"]),
            started_ms=int(d["started_ms"]),
            worker=str(d["worker"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class FaultWindow:
    """A fault from its start until the faulty part was back (restarted process ready,
    paused process continued, service answering again). ``pid`` is the process hit, 0 for
    none known."""

    kind: FaultKind
    target: str
    start_ms: int
    end_ms: int
    pid: int = 0

    def covers(self, t_ms: int, after_ms: int = 0) -> bool:
        """Whether ``t_ms`` falls in the window or less than ``after_ms`` after it."""
        return self.start_ms <= t_ms <= self.end_ms + after_ms


@dataclass(frozen=True)
class FinalState:
    """A task as ``GetTask`` returned it after the drain (``state`` is the enum name without
    its prefix, or ``NOT_FOUND`` / ``UNREADABLE``)."""

    task_id: str
    state: str
    attempt: int
    # When the task last changed (a cancel: when it was written, or, for a cancel the store
    # acknowledged within its fence, when that was known).
    updated_ms: int = 0


@dataclass(frozen=True)
class Crash:
    """A process of the cluster that ended although no fault hit it: ``code`` is its exit
    status (negative: the signal), ``log`` the file of the incarnation that ended. The suite
    starts it again, as a supervisor would, and the run fails for it. ``last_line``: the
    log's last line, most often the reason (a record kept where the log is not, CI's)."""

    role: str
    code: int
    at_ms: int
    log: str
    last_line: str = ""


@dataclass(frozen=True)
class History:
    """Everything a run recorded; the checker's only input."""

    creates: tuple[CreateRecord, ...]
    cancels: tuple[CancelRecord, ...]
    starts: tuple[Start, ...]
    faults: tuple[FaultWindow, ...]
    finals: tuple[FinalState, ...]
    dead_letters: frozenset[str]
    bulk_cancels: tuple[BulkCancelRecord, ...] = ()
    crashes: tuple[Crash, ...] = ()


def write_history(history: History, path: Path) -> None:
    """Every record but the starts (already in the workers' log) as JSON lines."""
    with open(path, "w", encoding="utf-8") as f:
        for name in ("creates", "cancels", "faults", "finals", "bulk_cancels", "crashes"):
            for item in getattr(history, name):
                f.write(json.dumps({"record": name, **dataclasses.asdict(item)}) + "\n")
        f.write(json.dumps({"record": "dead_letters", "ids": sorted(history.dead_letters)}))
        f.write("\n")


def _calls(items: list[dict[str, Any]]) -> tuple[Call, ...]:
    return tuple(Call(**c) for c in items)


def _record(d: dict[str, Any]) -> object:
    match d.pop("record"):
        case "creates":
            d["kind"] = TaskKind(d["kind"])
            return CreateRecord(**{**d, "calls": _calls(d["calls"])})
        case "cancels":
            return CancelRecord(d["task_id"], _calls(d["calls"]))
        case "faults":
            return FaultWindow(**{**d, "kind": FaultKind(d["kind"])})
        case "finals":
            return FinalState(**d)
        case "bulk_cancels":
            return BulkCancelRecord(d["batch"], tuple(d["task_ids"]), _calls(d["calls"]))
        case "crashes":
            return Crash(**d)
        case _:
            return frozenset(d["ids"])


def read_history(records: Path, starts: Path) -> History:
    """A run's history from its two files (``write_history``'s and the workers' log)."""
    items = [_record(json.loads(line)) for line in records.read_text().splitlines() if line]
    parsed = (parse_start(line) for line in starts.read_text().splitlines())
    return History(
        creates=tuple(i for i in items if isinstance(i, CreateRecord)),
        cancels=tuple(i for i in items if isinstance(i, CancelRecord)),
        starts=tuple(s for s in parsed if s is not None and s.task_id != WARM_UP_ID),
        faults=tuple(i for i in items if isinstance(i, FaultWindow)),
        finals=tuple(i for i in items if isinstance(i, FinalState)),
        dead_letters=next((i for i in items if isinstance(i, frozenset)), frozenset()),
        bulk_cancels=tuple(i for i in items if isinstance(i, BulkCancelRecord)),
        crashes=tuple(i for i in items if isinstance(i, Crash)),
    )
