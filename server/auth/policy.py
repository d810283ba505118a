"""Which role each RPC needs, and where in its request the namespace or queue is.

``POLICY`` has one row per method of every tikk service; a method without a row is refused
(fail closed), and a unit test checks every method in the service descriptors has one. Health
checks stay open (load balancers probe without credentials); reflection needs a valid
credential of any role, since it shows the API's shape and no data.

A rule's ``scopes`` names the namespaces (or queues) of one request message. A unary request is
checked before the servicer runs; a request stream is checked message by message as each
arrives (every task of a CreateTasks / ImportTasks message, every result's ``delivery.queue``
in a ReportResults / ReportResultBatches message), and once before it starts for the role
itself. ``scopes`` returning nothing means the role on at least one scope suffices.

Decisions on calls that span namespaces:

- ``ListQueues`` shows every queue with its backlog: queues are shared by all namespaces, so
  their names and sizes are everyone's data. It needs ``read`` on ``*``. ``UpdateQueue``
  (pause, resume, rate) acts on every namespace's tasks in the queue: ``admin`` on ``*``.
- ``GetWorkerConfig`` names no queue; it returns where workers consume from. Any ``worker``
  grant suffices: every worker needs it before it knows its queues' deliveries.
- ``PreviewSchedule`` of a spec (no stored schedule) reads nothing stored; ``read`` on any
  namespace suffices. Of a stored schedule, ``read`` on its namespace.
- ``TriggerSchedule`` creates a task now: ``write``. Pausing, resuming, deleting and
  backfilling schedules, and redriving and purging dead letters are ``admin``, one at a time
  or in bulk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tikk.credentials import ANY_SCOPE, Credential, Role
from tikk.errors import PermissionDenied
from tikk.model import DEFAULT_NAMESPACE

# Services reachable without any credential, and those any valid credential may use.
OPEN_SERVICES = frozenset({"grpc.health.v1.Health"})
AUTHENTICATED_SERVICES = frozenset(
    {"grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection"}
)


@dataclass(frozen=True)
class Rule:
    """What a method needs: ``role`` (None: any valid credential) on every scope ``scopes``
    finds in a request message. ``kind`` says what the scopes are, for messages."""

    role: Role | None
    scopes: Callable[[Any], Iterable[str]] = lambda message: ()
    kind: str = "namespace"

    def check(self, credential: Credential, message: Any) -> None:
        """Raise ``PermissionDenied`` unless ``credential`` may send ``message``."""
        if self.role is None:
            return
        found = set(self.scopes(message))
        for scope in sorted(found):
            if not credential.allows(self.role, scope):
                where = "every namespace" if scope == ANY_SCOPE else f"{self.kind} {scope[:128]!r}"
                raise PermissionDenied(f"role {self.role.value} on {where} is not granted")
        if not found:
            self.check_role(credential)

    def check_role(self, credential: Credential) -> None:
        """Raise ``PermissionDenied`` unless ``credential`` has the role on some scope."""
        if self.role is not None and not credential.allows_somewhere(self.role):
            raise PermissionDenied(f"role {self.role.value} is not granted on any {self.kind}")


def _ns(value: str) -> str:
    # The API reads an empty namespace as the default one; so must the check.
    return value or DEFAULT_NAMESPACE


def _namespace(m: Any) -> Iterable[str]:
    return (_ns(m.namespace),)


def _filter_namespace(m: Any) -> Iterable[str]:
    return (_ns(m.filter.namespace),)


def _schedule_namespace(m: Any) -> Iterable[str]:
    return (_ns(m.schedule.namespace),)


def _task_namespaces(m: Any) -> Iterable[str]:
    return {_ns(t.namespace) for t in m.tasks}


def _every_namespace(m: Any) -> Iterable[str]:
    return (ANY_SCOPE,)


def _preview_namespace(m: Any) -> Iterable[str]:
    return (_ns(m.schedule.namespace),) if m.WhichOneof("target") == "schedule" else ()


def _result_queue(m: Any) -> Iterable[str]:
    return (m.delivery.queue,)


def _batch_queues(m: Any) -> Iterable[str]:
    return {r.delivery.queue for r in m.results}


def _running_queues(m: Any) -> Iterable[str]:
    return {r.queue for r in m.runs}


READ = Rule(Role.READ, _namespace)
WRITE = Rule(Role.WRITE, _namespace)
ADMIN = Rule(Role.ADMIN, _namespace)
_TASKS, _HISTORY = "/tikk.v1.TaskService/", "/tikk.v1.HistoryService/"
_SCHEDULES, _WORKERS = "/tikk.v1.ScheduleService/", "/tikk.v1.WorkerService/"
_ADMIN = "/tikk.v1.AdminService/"
_BULK = "/tikk.v1.BulkService/"

POLICY: Mapping[str, Rule] = {
    _TASKS + "CreateTask": WRITE,
    _TASKS + "CreateTasks": Rule(Role.WRITE, _task_namespaces),
    _TASKS + "ImportTasks": Rule(Role.WRITE, _task_namespaces),
    _TASKS + "GetTask": READ,
    _TASKS + "CancelTask": WRITE,
    _TASKS + "RescheduleTask": WRITE,
    _TASKS + "ListTasks": READ,
    _TASKS + "ListQueues": Rule(Role.READ, _every_namespace),
    # Queues are shared by every namespace: steering one is an admin's of them all.
    _TASKS + "UpdateQueue": Rule(Role.ADMIN, _every_namespace),
    _HISTORY + "ListTaskRuns": READ,
    _HISTORY + "ListRuns": READ,
    _HISTORY + "GetRun": READ,
    _HISTORY + "ListDeadLetters": READ,
    _HISTORY + "RedriveTask": ADMIN,
    _HISTORY + "PurgeDeadLetter": ADMIN,
    _HISTORY + "ListScheduleOccurrences": READ,
    _SCHEDULES + "CreateSchedule": Rule(Role.WRITE, _schedule_namespace),
    _SCHEDULES + "GetSchedule": READ,
    _SCHEDULES + "ListSchedules": READ,
    _SCHEDULES + "UpdateSchedule": Rule(Role.WRITE, _schedule_namespace),
    _SCHEDULES + "DeleteSchedule": ADMIN,
    _SCHEDULES + "PauseSchedule": ADMIN,
    _SCHEDULES + "ResumeSchedule": ADMIN,
    _SCHEDULES + "TriggerSchedule": WRITE,
    _SCHEDULES + "BackfillSchedule": ADMIN,
    _SCHEDULES + "PreviewSchedule": Rule(Role.READ, _preview_namespace),
    _WORKERS + "GetWorkerConfig": Rule(Role.WORKER, kind="queue"),
    _WORKERS + "ReportResults": Rule(Role.WORKER, _result_queue, kind="queue"),
    _WORKERS + "ReportResultBatches": Rule(Role.WORKER, _batch_queues, kind="queue"),
    # The server answers only for tasks of the queues named (``TaskOps.cancelled_attempts``).
    _WORKERS + "CheckCancellations": Rule(Role.WORKER, _running_queues, kind="queue"),
    # Quotas (proto/tikk/v1/admin.proto): a namespace's readers see its quotas and usage, and
    # its admins may recount the usage; only an operator (admin on every namespace) changes
    # them, since quotas exist to bound what a tenant's own admins can do.
    _ADMIN + "GetNamespaceQuotas": READ,
    _ADMIN + "SetNamespaceQuotas": Rule(Role.ADMIN, _every_namespace),
    _ADMIN + "RecountNamespaceUsage": ADMIN,
    # Bulk verbs need what the verb needs of one task: write to cancel, admin to re-drive or
    # purge; stopping an action needs write, seeing them read.
    _BULK + "CountTasks": Rule(Role.READ, _filter_namespace),
    _BULK + "BulkCancelTasks": Rule(Role.WRITE, _filter_namespace),
    _BULK + "BulkRedriveTasks": Rule(Role.ADMIN, _filter_namespace),
    _BULK + "BulkPurgeTasks": Rule(Role.ADMIN, _filter_namespace),
    _BULK + "RecountUsage": ADMIN,
    _BULK + "GetBulkAction": READ,
    _BULK + "ListBulkActions": READ,
    _BULK + "StopBulkAction": WRITE,
}
ANY_CREDENTIAL = Rule(None)


def rule_of(method: str, policy: Mapping[str, Rule] = POLICY) -> Rule | None:
    """The rule of ``method`` (``/package.Service/Method``); ``ANY_CREDENTIAL`` for the
    authenticated services; None when there is none (refuse the call)."""
    service = method.strip("/").partition("/")[0]
    if service in AUTHENTICATED_SERVICES:
        return ANY_CREDENTIAL
    return policy.get(method)


def is_open(method: str) -> bool:
    return method.strip("/").partition("/")[0] in OPEN_SERVICES
