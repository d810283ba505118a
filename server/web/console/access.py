"""Which gRPC method each console route stands for, so that a login may do in the console
exactly what the same credential may do over gRPC.

``ROUTES`` has one row per route the console serves (its HTTP method and path pattern as
aiohttp registers it), naming the RPC the route reads or acts through; a route that carries
several actions (``…/tasks/{task_id}/{verb}``) names one RPC per verb. The check is the API's
own: the method's rule in ``server.auth.policy.POLICY`` applied to the request that RPC would
get for the route's namespace, so the role, the namespace and the refusal's wording are the
API's. A route without a row is refused (fail closed), and a unit test holds the rows and the
registered routes to each other, both ways.

Routes that show nothing of any namespace (the overview's frame, the find-a-task form, sign
out) need only a console session (``SESSION``). The overview's queue table and chart cover
every namespace's tasks, so they are drawn only for a login that may call ``ListQueues``;
another login sees its namespaces instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf import descriptor_pool, json_format, message_factory
from google.protobuf.message import Message

from server.auth.policy import POLICY
from tikk.credentials import Credential
from tikk.errors import NotFound, PermissionDenied
from tikk.v1 import bulk_pb2, history_pb2, schedules_pb2, tasks_pb2

# Loaded so that their methods are in the default descriptor pool the requests come from.
_SERVICES = (bulk_pb2, history_pb2, schedules_pb2, tasks_pb2)

SESSION = ""
_TASKS, _HISTORY = "/tikk.v1.TaskService/", "/tikk.v1.HistoryService/"
_SCHEDULES, _BULK = "/tikk.v1.ScheduleService/", "/tikk.v1.BulkService/"

GET_TASK = _TASKS + "GetTask"
CANCEL_TASK = _TASKS + "CancelTask"
LIST_TASKS = _TASKS + "ListTasks"
LIST_QUEUES = _TASKS + "ListQueues"
LIST_RUNS = _HISTORY + "ListRuns"
LIST_DEAD_LETTERS = _HISTORY + "ListDeadLetters"
REDRIVE_TASK = _HISTORY + "RedriveTask"
PURGE_DEAD_LETTER = _HISTORY + "PurgeDeadLetter"
LIST_SCHEDULES = _SCHEDULES + "ListSchedules"
GET_SCHEDULE = _SCHEDULES + "GetSchedule"
PAUSE_SCHEDULE = _SCHEDULES + "PauseSchedule"
RESUME_SCHEDULE = _SCHEDULES + "ResumeSchedule"
TRIGGER_SCHEDULE = _SCHEDULES + "TriggerSchedule"
BACKFILL_SCHEDULE = _SCHEDULES + "BackfillSchedule"
BULK_REDRIVE = _BULK + "BulkRedriveTasks"
BULK_PURGE = _BULK + "BulkPurgeTasks"
GET_BULK_ACTION = _BULK + "GetBulkAction"
LIST_BULK_ACTIONS = _BULK + "ListBulkActions"
STOP_BULK_ACTION = _BULK + "StopBulkAction"

# A route's RPC for each verb; "" is the verb of a route without one.
Verbs = Mapping[str, str]
_NS = "/console/ns/{ns}"
_BULK_VERBS: Verbs = {"redrive": BULK_REDRIVE, "purge": BULK_PURGE}

ROUTES: Mapping[tuple[str, str], Verbs] = {
    ("GET", "/console/"): {"": SESSION},
    ("GET", "/console/api/overview"): {"": LIST_QUEUES},
    ("GET", "/console/tasks"): {"": SESSION},
    ("POST", "/console/logout"): {"": SESSION},
    ("GET", _NS + "/tasks/{task_id}"): {"": GET_TASK},
    # Stop is a cancel that also ends the running attempt (``stop_running``).
    ("POST", _NS + "/tasks/{task_id}/{verb}"): {
        "cancel": CANCEL_TASK,
        "stop": CANCEL_TASK,
        "redrive": REDRIVE_TASK,
        "purge": PURGE_DEAD_LETTER,
    },
    ("GET", _NS + "/runs"): {"": LIST_RUNS},
    # The due counts of the coming minutes are a read of the namespace's tasks.
    ("GET", _NS + "/upcoming"): {"": LIST_TASKS},
    ("GET", _NS + "/schedules"): {"": LIST_SCHEDULES},
    ("GET", _NS + "/schedules/{sid}"): {"": GET_SCHEDULE},
    ("POST", _NS + "/schedules/{sid}/{verb}"): {
        "pause": PAUSE_SCHEDULE,
        "resume": RESUME_SCHEDULE,
        "trigger": TRIGGER_SCHEDULE,
        "backfill": BACKFILL_SCHEDULE,
    },
    ("GET", _NS + "/dead-letters"): {"": LIST_DEAD_LETTERS},
    ("POST", _NS + "/dead-letters/{verb}"): {"redrive": REDRIVE_TASK, "purge": PURGE_DEAD_LETTER},
    # The count before a bulk action is that action's dry run: it needs the action's role.
    ("GET", _NS + "/dead-letters/all"): _BULK_VERBS,
    ("GET", _NS + "/bulk"): {"": LIST_BULK_ACTIONS},
    ("POST", _NS + "/bulk"): _BULK_VERBS,
    ("GET", _NS + "/bulk/{action_id}"): {"": GET_BULK_ACTION},
    ("POST", _NS + "/bulk/{action_id}/stop"): {"": STOP_BULK_ACTION},
}


def rpc_of(method: str, path: str, verb: str) -> str:
    """The RPC that ``verb`` of the route (``method``, ``path`` as registered) stands for.
    ``PermissionDenied`` for a route without a row; ``NotFound`` naming the verbs it has."""
    verbs = ROUTES.get((method, path))
    if verbs is None:
        raise PermissionDenied(f"the console has no rule for {method} {path}")
    if "" in verbs:
        return verbs[""]
    if verb not in verbs:
        known = ", ".join(verbs)
        raise NotFound(f"no action {verb[:64]!r} here ({known})")
    return verbs[verb]


def check(credential: Credential, rpc: str, namespace: str) -> None:
    """Raise ``PermissionDenied`` unless ``credential`` may call ``rpc`` on ``namespace``,
    by the API's rule for it."""
    if rpc == SESSION:
        return
    POLICY[rpc].check(credential, request_of(rpc, namespace))


def allowed(credential: Credential | None, rpc: str, namespace: str) -> bool:
    """Whether the console offers what ``rpc`` does on ``namespace`` (None: auth is off)."""
    if credential is None:
        return True
    try:
        check(credential, rpc, namespace)
    except PermissionDenied:
        return False
    return True


def request_of(rpc: str, namespace: str) -> Message:
    """The request ``rpc`` gets for ``namespace``: an empty one naming the namespace where
    the method's request holds it (its own field, or its filter's for the bulk verbs)."""
    method = descriptor_pool.Default().FindMethodByName(rpc.strip("/").replace("/", "."))
    fields = method.input_type.fields_by_name
    named: dict[str, object] = {}
    if "namespace" in fields:
        named = {"namespace": namespace}
    elif "filter" in fields:
        named = {"filter": {"namespace": namespace}}
    request: Message = message_factory.GetMessageClass(method.input_type)()
    return json_format.ParseDict(named, request)
