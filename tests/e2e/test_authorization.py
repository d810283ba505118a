"""The authorization matrix against a real ``tikk server --auth`` over TLS: for each kind of
caller, each RPC of every tikk service, in its own and in another namespace (or queue), the
status. And mTLS: a client certificate's subject stands for the credential that names it.

The expectations are written here from the issue's role definitions, not read from the
server's policy table, so a wrong row in the table fails this test. Raw stubs with
``authorization`` metadata; credentials made by the real ``tikk auth`` CLI.
"""

from __future__ import annotations

import functools
import importlib
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.e2e.auth_stack import AuthStack, bearer, code_of, tampered
from tests.unit.test_auth_policy import service_methods
from tests.waiting import eventually
from tikk.client import Client, PermissionDeniedError, Transport, UnauthenticatedError
from tikk.v1 import (
    bulk_pb2,
    bulk_pb2_grpc,
    history_pb2,
    history_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    tasks_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)

pytestmark = pytest.mark.e2e

OWN, OTHER = "own", "other"
NAMESPACE = {OWN: "team-a", OTHER: "team-b"}
QUEUE = {OWN: "emails", OTHER: "billing"}
TASK, SCHEDULE = "t1", "s1"
T = 15.0
OK, DENIED, UNAUTH = (
    grpc.StatusCode.OK,
    grpc.StatusCode.PERMISSION_DENIED,
    (grpc.StatusCode.UNAUTHENTICATED),
)
# The callers with a valid credential, and their grants (in tikk auth's ROLE:SCOPE form).
GRANTS = {
    "read": [f"read:{NAMESPACE[OWN]}"],
    "write": [f"write:{NAMESPACE[OWN]}"],
    "admin": [f"admin:{NAMESPACE[OWN]}"],
    "worker": [f"worker:{QUEUE[OWN]}"],
    "read-all": ["read:*"],
    "admin-all": ["admin:*"],
}
_RANK = {"read": 1, "write": 2, "admin": 3}
Meta = Any


@dataclass(frozen=True)
class Rpc:
    """One RPC: the role it needs (``read-all``/``admin-all``: on every namespace; ``worker-any``: a
    worker grant on any queue), the call, and the status it has in the caller's own scope
    when allowed (None: only "not refused" is checked)."""

    name: str
    need: str
    call: Callable[[grpc.Channel, str, Meta], object]
    own_code: grpc.StatusCode | None = OK
    scoped: bool = True


def allowed(role: str, need: str, where: str) -> bool:
    for grant in GRANTS.get(role, []):
        kind, scope = grant.split(":")
        if need == "read-all":
            ok = kind in _RANK and scope == "*"
        elif need == "admin-all":
            ok = kind == "admin" and scope == "*"
        elif need == "worker-any":
            ok = kind == "worker"
        elif need == "worker":
            ok = kind == "worker" and scope in ("*", QUEUE[where])
        else:
            ok = kind in _RANK and _RANK[kind] >= _RANK[need] and scope in ("*", NAMESPACE[where])
        if ok:
            return True
    return False


def _tasks(ch: grpc.Channel) -> Any:
    return tasks_pb2_grpc.TaskServiceStub(ch)


def _history(ch: grpc.Channel) -> Any:
    return history_pb2_grpc.HistoryServiceStub(ch)


def _schedules(ch: grpc.Channel) -> Any:
    return schedules_pb2_grpc.ScheduleServiceStub(ch)


def _workers(ch: grpc.Channel) -> Any:
    return worker_pb2_grpc.WorkerServiceStub(ch)


def _create(ns: str, task_id: str = "") -> tasks_pb2.CreateTaskRequest:
    return tasks_pb2.CreateTaskRequest(namespace=ns, task_id=task_id, queue="emails", handler="h")


def _schedule(ns: str, schedule_id: str) -> schedules_pb2.Schedule:
    return schedules_pb2.Schedule(
        namespace=ns, id=schedule_id, queue="emails", handler="h",
        spec=schedules_pb2.ScheduleSpec(interval=Duration(seconds=3600)),
    )  # fmt: skip


def _result(where: str) -> worker_pb2.RunResult:
    delivery = worker_pb2.Delivery(namespace=NAMESPACE[OWN], task_id="none", queue=QUEUE[where])
    return worker_pb2.RunResult(
        run_id=uuid.uuid4().hex, delivery=delivery, kind=worker_pb2.RESULT_KIND_SUCCEEDED
    )


def _at(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


def _task_rpcs() -> list[Rpc]:
    ns = NAMESPACE
    return [
        Rpc("CreateTask", "write", lambda ch, w, md: _tasks(ch).CreateTask(
            _create(ns[w]), timeout=T, metadata=md)),
        Rpc("CreateTasks", "write", lambda ch, w, md: _tasks(ch).CreateTasks(
            iter([tasks_pb2.CreateTasksRequest(tasks=[_create(ns[w])])]), timeout=T,
            metadata=md)),
        Rpc("ImportTasks", "write", lambda ch, w, md: list(_tasks(ch).ImportTasks(
            iter([tasks_pb2.ImportTasksRequest(tasks=[_create(ns[w])], batch_id=1)]),
            timeout=T, metadata=md))),
        Rpc("GetTask", "read", lambda ch, w, md: _tasks(ch).GetTask(
            tasks_pb2.GetTaskRequest(namespace=ns[w], task_id=TASK), timeout=T, metadata=md)),
        Rpc("CancelTask", "write", lambda ch, w, md: _tasks(ch).CancelTask(
            tasks_pb2.CancelTaskRequest(namespace=ns[w], task_id="missing"), timeout=T,
            metadata=md), grpc.StatusCode.NOT_FOUND),
        Rpc("ListTasks", "read", lambda ch, w, md: _tasks(ch).ListTasks(
            tasks_pb2.ListTasksRequest(namespace=ns[w], queue="emails"), timeout=T, metadata=md)),
        Rpc("RescheduleTask", "write", lambda ch, w, md: _tasks(ch).RescheduleTask(
            tasks_pb2.RescheduleTaskRequest(namespace=ns[w], task_id="missing",
            delay=Duration(seconds=60)), timeout=T, metadata=md), grpc.StatusCode.NOT_FOUND),
        Rpc("ListQueues", "read-all", lambda ch, w, md: _tasks(ch).ListQueues(
            tasks_pb2.ListQueuesRequest(), timeout=T, metadata=md), scoped=False),
        Rpc("UpdateQueue", "admin-all", lambda ch, w, md: _tasks(ch).UpdateQueue(
            tasks_pb2.UpdateQueueRequest(name="authz-probe", max_per_second=0), timeout=T,
            metadata=md), scoped=False),
    ]  # fmt: skip


def _history_rpcs() -> list[Rpc]:
    ns = NAMESPACE
    return [
        Rpc("ListTaskRuns", "read", lambda ch, w, md: _history(ch).ListTaskRuns(
            history_pb2.ListTaskRunsRequest(namespace=ns[w], task_id=TASK), timeout=T,
            metadata=md)),
        Rpc("ListRuns", "read", lambda ch, w, md: _history(ch).ListRuns(
            history_pb2.ListRunsRequest(namespace=ns[w], queue="emails"), timeout=T, metadata=md)),
        Rpc("GetRun", "read", lambda ch, w, md: _history(ch).GetRun(
            history_pb2.GetRunRequest(namespace=ns[w], run_id="missing"), timeout=T,
            metadata=md), grpc.StatusCode.NOT_FOUND),
        Rpc("ListDeadLetters", "read", lambda ch, w, md: _history(ch).ListDeadLetters(
            history_pb2.ListDeadLettersRequest(namespace=ns[w]), timeout=T, metadata=md)),
        Rpc("RedriveTask", "admin", lambda ch, w, md: _history(ch).RedriveTask(
            history_pb2.RedriveTaskRequest(namespace=ns[w], task_id=TASK), timeout=T,
            metadata=md), grpc.StatusCode.FAILED_PRECONDITION),
        Rpc("PurgeDeadLetter", "admin", lambda ch, w, md: _history(ch).PurgeDeadLetter(
            history_pb2.PurgeDeadLetterRequest(namespace=ns[w], task_id=TASK), timeout=T,
            metadata=md), grpc.StatusCode.FAILED_PRECONDITION),
        Rpc("ListScheduleOccurrences", "read", lambda ch, w, md: _history(ch)
            .ListScheduleOccurrences(history_pb2.ListScheduleOccurrencesRequest(
                namespace=ns[w], schedule_id=SCHEDULE), timeout=T, metadata=md)),
    ]  # fmt: skip


def _schedule_rpcs() -> list[Rpc]:
    ns, missing = NAMESPACE, grpc.StatusCode.NOT_FOUND

    def ref(cls: Any, w: str, schedule_id: str = "missing") -> Any:
        return cls(namespace=ns[w], schedule_id=schedule_id)

    return [
        Rpc("CreateSchedule", "write", lambda ch, w, md: _schedules(ch).CreateSchedule(
            schedules_pb2.CreateScheduleRequest(schedule=_schedule(ns[w], uuid.uuid4().hex)),
            timeout=T, metadata=md)),
        Rpc("GetSchedule", "read", lambda ch, w, md: _schedules(ch).GetSchedule(
            ref(schedules_pb2.GetScheduleRequest, w, SCHEDULE), timeout=T, metadata=md)),
        Rpc("ListSchedules", "read", lambda ch, w, md: _schedules(ch).ListSchedules(
            schedules_pb2.ListSchedulesRequest(namespace=ns[w]), timeout=T, metadata=md)),
        Rpc("UpdateSchedule", "write", lambda ch, w, md: _schedules(ch).UpdateSchedule(
            schedules_pb2.UpdateScheduleRequest(schedule=_schedule(ns[w], SCHEDULE)),
            timeout=T, metadata=md)),
        Rpc("DeleteSchedule", "admin", lambda ch, w, md: _schedules(ch).DeleteSchedule(
            ref(schedules_pb2.DeleteScheduleRequest, w), timeout=T, metadata=md), missing),
        Rpc("PauseSchedule", "admin", lambda ch, w, md: _schedules(ch).PauseSchedule(
            ref(schedules_pb2.PauseScheduleRequest, w), timeout=T, metadata=md), missing),
        Rpc("ResumeSchedule", "admin", lambda ch, w, md: _schedules(ch).ResumeSchedule(
            ref(schedules_pb2.ResumeScheduleRequest, w), timeout=T, metadata=md), missing),
        Rpc("TriggerSchedule", "write", lambda ch, w, md: _schedules(ch).TriggerSchedule(
            ref(schedules_pb2.TriggerScheduleRequest, w), timeout=T, metadata=md), missing),
        Rpc("BackfillSchedule", "admin", lambda ch, w, md: _schedules(ch).BackfillSchedule(
            schedules_pb2.BackfillScheduleRequest(namespace=ns[w], schedule_id="missing",
            start_time=_at(1_700_000_000), end_time=_at(1_700_003_600)), timeout=T,
            metadata=md), missing),
        Rpc("PreviewSchedule", "read", lambda ch, w, md: _schedules(ch).PreviewSchedule(
            schedules_pb2.PreviewScheduleRequest(
                schedule=ref(schedules_pb2.GetScheduleRequest, w, SCHEDULE)),
            timeout=T, metadata=md)),
    ]  # fmt: skip


def _worker_rpcs() -> list[Rpc]:
    return [
        Rpc("GetWorkerConfig", "worker-any", lambda ch, w, md: _workers(ch).GetWorkerConfig(
            worker_pb2.GetWorkerConfigRequest(), timeout=T, metadata=md), scoped=False),
        Rpc("ReportResults", "worker", lambda ch, w, md: list(_workers(ch).ReportResults(
            iter([_result(w)]), timeout=T, metadata=md))),
        Rpc("ReportResultBatches", "worker", lambda ch, w, md: list(
            _workers(ch).ReportResultBatches(
                iter([worker_pb2.RunResultBatch(results=[_result(w)])]), timeout=T,
                metadata=md))),
        Rpc("CheckCancellations", "worker", lambda ch, w, md: _workers(ch).CheckCancellations(
            worker_pb2.CheckCancellationsRequest(runs=[worker_pb2.RunningAttempt(
                namespace=NAMESPACE[OWN], task_id="none", queue=QUEUE[w], attempt=1)]),
            timeout=T, metadata=md)),
    ]  # fmt: skip


def _admin_rpcs() -> list[Rpc]:
    """The AdminService's, when this tree has it (it arrives with namespace quotas)."""
    try:
        admin_pb2 = importlib.import_module("tikk.v1.admin_pb2")
        grpc_module = importlib.import_module("tikk.v1.admin_pb2_grpc")
    except ImportError:
        return []

    def stub(ch: grpc.Channel) -> Any:
        return grpc_module.AdminServiceStub(ch)

    ns = NAMESPACE
    return [
        Rpc("GetNamespaceQuotas", "read", lambda ch, w, md: stub(ch).GetNamespaceQuotas(
            admin_pb2.GetNamespaceQuotasRequest(namespace=ns[w]), timeout=T, metadata=md)),
        Rpc("SetNamespaceQuotas", "admin-all", lambda ch, w, md: stub(ch).SetNamespaceQuotas(
            admin_pb2.SetNamespaceQuotasRequest(namespace=ns[w]), timeout=T, metadata=md)),
        Rpc("RecountNamespaceUsage", "admin", lambda ch, w, md: stub(ch).RecountNamespaceUsage(
            admin_pb2.RecountNamespaceUsageRequest(namespace=ns[w]), timeout=T, metadata=md)),
    ]  # fmt: skip


def _bulk(ch: grpc.Channel) -> Any:
    return bulk_pb2_grpc.BulkServiceStub(ch)


def _bulk_rpcs() -> list[Rpc]:
    """Bulk verbs need what their verb needs of one task: write to cancel, admin to re-drive
    and purge; counting and following actions need read, stopping one write."""
    ns = NAMESPACE

    def dry(w: str) -> bulk_pb2.BulkActionRequest:
        return bulk_pb2.BulkActionRequest(
            filter=bulk_pb2.TaskFilter(namespace=ns[w], queue="emails"), dry_run=True
        )

    missing = grpc.StatusCode.NOT_FOUND
    return [
        Rpc("CountTasks", "read", lambda ch, w, md: _bulk(ch).CountTasks(
            bulk_pb2.CountTasksRequest(filter=dry(w).filter), timeout=T, metadata=md)),
        Rpc("BulkCancelTasks", "write", lambda ch, w, md: _bulk(ch).BulkCancelTasks(
            dry(w), timeout=T, metadata=md)),
        Rpc("BulkRedriveTasks", "admin", lambda ch, w, md: _bulk(ch).BulkRedriveTasks(
            dry(w), timeout=T, metadata=md)),
        Rpc("BulkPurgeTasks", "admin", lambda ch, w, md: _bulk(ch).BulkPurgeTasks(
            dry(w), timeout=T, metadata=md)),
        Rpc("RecountUsage", "admin", lambda ch, w, md: _bulk(ch).RecountUsage(
            bulk_pb2.RecountUsageRequest(namespace=ns[w]), timeout=T, metadata=md)),
        Rpc("GetBulkAction", "read", lambda ch, w, md: _bulk(ch).GetBulkAction(
            bulk_pb2.GetBulkActionRequest(namespace=ns[w], id="missing"), timeout=T,
            metadata=md), missing),
        Rpc("ListBulkActions", "read", lambda ch, w, md: _bulk(ch).ListBulkActions(
            bulk_pb2.ListBulkActionsRequest(namespace=ns[w]), timeout=T, metadata=md)),
        Rpc("StopBulkAction", "write", lambda ch, w, md: _bulk(ch).StopBulkAction(
            bulk_pb2.StopBulkActionRequest(namespace=ns[w], id="missing"), timeout=T,
            metadata=md), missing),
    ]  # fmt: skip


RPCS = [
    *_task_rpcs(), *_history_rpcs(), *_schedule_rpcs(), *_worker_rpcs(), *_admin_rpcs(),
    *_bulk_rpcs(),
]  # fmt: skip


def status(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as exc:
        return code_of(exc), exc.details() or ""
    return OK, ""


@dataclass
class Matrix:
    """The server under test, a channel to it, and every caller's token."""

    stack: AuthStack
    address: str
    channel: grpc.Channel
    tokens: dict[str, str | None] = field(repr=False)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    stack = AuthStack(tmp_path_factory.mktemp("authz"))
    tokens: dict[str, str | None] = {
        role: stack.create(role, *grants)[1] for role, grants in GRANTS.items()
    }
    revoked_id, tokens["revoked"] = stack.create("revoked", "admin:*")
    stack.revoke(revoked_id)
    admin = tokens["admin"]
    assert admin is not None
    tokens["no-credential"] = None
    tokens["wrong-secret"] = tampered(admin)
    tokens["not-a-token"] = "let-me-in"
    address = stack.start_server(*stack.tls_args())
    channel = stack.channel(address)
    _seed(channel, bearer(admin))
    yield Matrix(stack, address, channel, tokens)
    channel.close()
    stack.close()


def _seed(channel: grpc.Channel, md: Meta) -> None:
    """The task and schedule the allowed lookups find in the caller's own namespace."""
    ns = NAMESPACE[OWN]
    _tasks(channel).CreateTask(_create(ns, TASK), timeout=T, metadata=md)
    request = schedules_pb2.CreateScheduleRequest(schedule=_schedule(ns, SCHEDULE))
    _schedules(channel).CreateSchedule(request, timeout=T, metadata=md)


def _expected(caller: str, rpc: Rpc, where: str) -> grpc.StatusCode | None:
    """The status of ``caller``'s call; None for "allowed, any outcome but a refusal"."""
    if caller not in GRANTS:
        return UNAUTH
    if not allowed(caller, rpc.need, where):
        return DENIED
    return rpc.own_code if where == OWN else None


CALLERS = [*GRANTS, "revoked", "no-credential", "wrong-secret", "not-a-token"]


def test_the_matrix_covers_every_rpc() -> None:
    served = {m.rsplit("/", 1)[1] for m in service_methods()}
    assert served <= {rpc.name for rpc in RPCS}


@pytest.mark.parametrize("caller", CALLERS)
def test_each_rpc_answers_each_caller_as_its_roles_say(matrix: Matrix, caller: str) -> None:
    md = bearer(matrix.tokens[caller])
    wrong = []
    for rpc in RPCS:
        for where in (OWN, OTHER) if rpc.scoped else (OWN,):
            code, details = status(functools.partial(rpc.call, matrix.channel, where, md))
            want = _expected(caller, rpc, where)
            refused = code in (DENIED, UNAUTH)
            if (want is None and refused) or (want is not None and code != want):
                wrong.append(f"{rpc.name} {where}: {code.name} {details!r}, expected "
                             f"{want.name if want else 'not refused'}")  # fmt: skip
    assert not wrong, f"{caller}:\n" + "\n".join(wrong)


def test_refusals_name_the_namespace_or_queue_and_role(matrix: Matrix) -> None:
    md = bearer(matrix.tokens["read"])
    code, details = status(lambda: RPCS[0].call(matrix.channel, OWN, md))
    assert code == DENIED
    assert "write" in details and NAMESPACE[OWN] in details
    md = bearer(matrix.tokens["worker"])
    report = next(r for r in RPCS if r.name == "ReportResultBatches")
    code, details = status(lambda: report.call(matrix.channel, OTHER, md))
    assert code == DENIED
    assert "worker" in details and QUEUE[OTHER] in details


def test_a_stream_is_checked_message_by_message(matrix: Matrix) -> None:
    """The batch for the caller's namespace is answered; the next, for another namespace,
    ends the stream refused, and nothing of it is stored."""
    md = bearer(matrix.tokens["write"])
    ok_id, other_id = uuid.uuid4().hex, uuid.uuid4().hex
    batches = [
        tasks_pb2.ImportTasksRequest(tasks=[_create(NAMESPACE[OWN], ok_id)], batch_id=1),
        tasks_pb2.ImportTasksRequest(tasks=[_create(NAMESPACE[OWN], other_id),
                                            _create(NAMESPACE[OTHER], other_id)], batch_id=2),
    ]  # fmt: skip
    answers = _answered_then_refused(
        lambda requests: _tasks(matrix.channel).ImportTasks(requests, timeout=T, metadata=md),
        batches,
    )
    assert [a.batch_id for a in answers] == [1] and answers[0].accepted == 1

    def get(task_id: str) -> grpc.StatusCode:
        req = tasks_pb2.GetTaskRequest(namespace=NAMESPACE[OWN], task_id=task_id)
        return status(lambda: _tasks(matrix.channel).GetTask(req, timeout=T, metadata=md))[0]

    assert get(ok_id) == OK
    assert get(other_id) == grpc.StatusCode.NOT_FOUND


def _answered_then_refused(
    call: Callable[[Iterator[Any]], Iterator[Any]], two: list[Any]
) -> list[Any]:
    """Send the first of ``two`` messages, and the second once the first is answered; the
    answers before the call ended PERMISSION_DENIED."""
    answers: list[Any] = []
    first_answered = threading.Event()

    def requests() -> Iterator[Any]:
        yield two[0]
        first_answered.wait(T)  # so the refusal cannot overtake the first answer
        yield two[1]

    with pytest.raises(grpc.RpcError) as refused:
        for answer in call(requests()):
            answers.append(answer)
            first_answered.set()
    assert code_of(refused.value) == DENIED, refused.value.details()
    return answers


def test_a_worker_stream_is_refused_at_the_first_result_of_another_queue(
    matrix: Matrix,
) -> None:
    md = bearer(matrix.tokens["worker"])
    batches = [worker_pb2.RunResultBatch(results=[_result(OWN)]),
               worker_pb2.RunResultBatch(results=[_result(OWN), _result(OTHER)])]  # fmt: skip
    for _ in range(5):  # the refusal must not race the first answer's sending
        answers = _answered_then_refused(
            lambda r: _workers(matrix.channel).ReportResultBatches(r, timeout=T, metadata=md),
            batches,
        )
        assert len(answers) == 1 and len(answers[0].acks) == 1


def test_health_is_open_and_reflection_needs_a_credential(matrix: Matrix) -> None:
    health = health_pb2_grpc.HealthStub(matrix.channel)
    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=T)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING

    def services(md: Meta) -> list[str]:
        stub = reflection_pb2_grpc.ServerReflectionStub(matrix.channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        [reply] = list(stub.ServerReflectionInfo(iter([ask]), timeout=T, metadata=md))
        return [s.name for s in reply.list_services_response.service]

    with pytest.raises(grpc.RpcError) as refused:
        services(())
    assert code_of(refused.value) == UNAUTH
    assert "tikk.v1.TaskService" in services(bearer(matrix.tokens["worker"]))


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    stack = AuthStack(tmp_path_factory.mktemp("mtls"))
    yield stack
    stack.close()


def _get(channel: grpc.Channel, where: str, token: str | None = None) -> grpc.StatusCode:
    req = tasks_pb2.GetTaskRequest(namespace=NAMESPACE[where], task_id="missing")
    return status(lambda: _tasks(channel).GetTask(req, timeout=T, metadata=bearer(token)))[0]


def test_a_client_certificate_subject_stands_for_its_credential(mtls: AuthStack) -> None:
    """The development client certificate (common name ``tikk-dev-client``) is mapped to a
    read credential; a bearer token, when sent too, decides instead; revoking the credential
    refuses the certificate."""
    credential_id, _ = mtls.create("svc", f"read:{NAMESPACE[OWN]}", subject="tikk-dev-client")
    _, writer = mtls.create("writer", f"write:{NAMESPACE[OTHER]}")
    address = mtls.start_server(*mtls.tls_args(mtls=True))
    with mtls.channel(address, client_cert=True) as channel:
        assert _get(channel, OWN) == grpc.StatusCode.NOT_FOUND  # admitted, nothing there
        assert _get(channel, OTHER) == DENIED
        assert _get(channel, OTHER, writer) == grpc.StatusCode.NOT_FOUND  # the token decides
        assert _get(channel, OWN, writer) == DENIED
        assert _get(channel, OWN, tampered(writer)) == UNAUTH
        mtls.revoke(credential_id)
        eventually(lambda: _get(channel, OWN) == UNAUTH, timeout=20)
    with mtls.channel(address) as channel:  # no client certificate: no handshake
        assert _get(channel, OWN, writer) == grpc.StatusCode.UNAVAILABLE


def test_the_python_client_presents_its_token(matrix: Matrix) -> None:
    """The Python client over TLS with a token (``tikk.client.Transport``): the writer's
    token creates, the reader's is refused with the namespace named."""
    pki = matrix.stack.pki()
    address = matrix.address

    def client(caller: str) -> Client:
        token = matrix.tokens[caller] or ""
        transport = Transport(ca_file=str(pki.ca_cert), token=token)
        return Client(address, namespace=NAMESPACE[OWN], transport=transport, timeout=T)

    task_id = uuid.uuid4().hex
    with client("write") as writer:
        assert writer.create_task(_create("", task_id)).created
        assert writer.get_task(task_id).id == task_id
    with client("read") as reader:
        assert reader.get_task(task_id).id == task_id
        with pytest.raises(PermissionDeniedError) as refused:
            reader.create_task(_create("", uuid.uuid4().hex))
    assert refused.value.code == DENIED and NAMESPACE[OWN] in refused.value.details
    with client("revoked") as revoked, pytest.raises(UnauthenticatedError):
        revoked.get_task(task_id)
