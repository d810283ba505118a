"""The policy table: every RPC has a rule (fail closed), and the rules read the right fields."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import tikk.v1
from server.auth.policy import ANY_CREDENTIAL, POLICY, is_open, rule_of
from tikk.credentials import Credential, Grant, Role
from tikk.errors import PermissionDenied
from tikk.v1 import schedules_pb2, tasks_pb2, worker_pb2


def service_methods() -> Iterator[str]:
    """Every method of every service in the generated tikk.v1 descriptors."""
    for module in pkgutil.iter_modules(tikk.v1.__path__):
        if not module.name.endswith("_pb2"):
            continue
        descriptor = importlib.import_module(f"tikk.v1.{module.name}").DESCRIPTOR
        for service in descriptor.services_by_name.values():
            for method in service.methods:
                yield f"/{service.full_name}/{method.name}"


def _credential(*grants: str) -> Credential:
    return Credential(
        credential_id="0" * 32,
        name="c",
        salt=b"s",
        secret_hash=b"h",
        grants=tuple(Grant.parse(g) for g in grants),
        created_ms=0,
    )


def test_every_method_of_every_service_has_a_rule() -> None:
    methods = list(service_methods())
    assert len(methods) >= 26  # the four services of tikk.v1 at least
    missing = [m for m in methods if m not in POLICY]
    assert not missing, f"methods without an authorization rule: {missing}"


def test_a_method_without_a_rule_has_none() -> None:
    assert rule_of("/tikk.v1.TaskService/DropEverything") is None
    assert rule_of("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") is (
        ANY_CREDENTIAL
    )
    assert is_open("/grpc.health.v1.Health/Check")
    assert not is_open("/tikk.v1.TaskService/GetTask")


def test_roles_include_the_lesser_ones() -> None:
    admin = _credential("admin:a")
    get = rule_of("/tikk.v1.TaskService/GetTask")
    create = rule_of("/tikk.v1.TaskService/CreateTask")
    redrive = rule_of("/tikk.v1.HistoryService/RedriveTask")
    assert get and create and redrive
    for rule in (get, create, redrive):
        rule.check(admin, tasks_pb2.GetTaskRequest(namespace="a"))
    writer = _credential("write:a")
    create.check(writer, tasks_pb2.CreateTaskRequest(namespace="a"))
    with pytest.raises(PermissionDenied, match="admin on namespace 'a'"):
        redrive.check(writer, tasks_pb2.GetTaskRequest(namespace="a"))
    with pytest.raises(PermissionDenied, match="worker"):
        rule_of("/tikk.v1.WorkerService/GetWorkerConfig").check_role(admin)  # type: ignore[union-attr]


def test_an_empty_namespace_is_the_default_one() -> None:
    rule = rule_of("/tikk.v1.TaskService/GetTask")
    assert rule is not None
    rule.check(_credential("read:default"), tasks_pb2.GetTaskRequest())
    with pytest.raises(PermissionDenied, match="'default'"):
        rule.check(_credential("read:other"), tasks_pb2.GetTaskRequest())


def test_every_task_of_a_bulk_message_is_checked() -> None:
    rule = rule_of("/tikk.v1.TaskService/ImportTasks")
    assert rule is not None
    mixed = tasks_pb2.ImportTasksRequest(
        tasks=[
            tasks_pb2.CreateTaskRequest(namespace="a"),
            tasks_pb2.CreateTaskRequest(namespace="b"),
        ]
    )
    rule.check(_credential("write:a", "write:b"), mixed)
    with pytest.raises(PermissionDenied, match="namespace 'b'"):
        rule.check(_credential("write:a"), mixed)


def test_every_result_of_a_batch_names_a_granted_queue() -> None:
    rule = rule_of("/tikk.v1.WorkerService/ReportResultBatches")
    assert rule is not None
    batch = worker_pb2.RunResultBatch(
        results=[
            worker_pb2.RunResult(delivery=worker_pb2.Delivery(queue="emails")),
            worker_pb2.RunResult(delivery=worker_pb2.Delivery(queue="billing")),
        ]
    )
    rule.check(_credential("worker:*"), batch)
    with pytest.raises(PermissionDenied, match="queue 'billing'"):
        rule.check(_credential("worker:emails"), batch)
    with pytest.raises(PermissionDenied):
        rule.check(_credential("admin:*"), batch)


def test_queues_of_every_namespace_need_read_on_all() -> None:
    rule = rule_of("/tikk.v1.TaskService/ListQueues")
    assert rule is not None
    rule.check(_credential("read:*"), tasks_pb2.ListQueuesRequest())
    with pytest.raises(PermissionDenied, match="every namespace"):
        rule.check(_credential("admin:a", "admin:b"), tasks_pb2.ListQueuesRequest())


def test_a_spec_preview_needs_read_somewhere() -> None:
    rule = rule_of("/tikk.v1.ScheduleService/PreviewSchedule")
    assert rule is not None
    spec = schedules_pb2.PreviewScheduleRequest(spec=schedules_pb2.ScheduleSpec(cron="* * * * *"))
    rule.check(_credential("read:x"), spec)
    with pytest.raises(PermissionDenied):
        rule.check(_credential("worker:*"), spec)
    stored = schedules_pb2.PreviewScheduleRequest(
        schedule=schedules_pb2.GetScheduleRequest(namespace="y", schedule_id="s")
    )
    with pytest.raises(PermissionDenied, match="namespace 'y'"):
        rule.check(_credential("read:x"), stored)


@pytest.mark.parametrize("text", ["read", "owner:a", "read:", "read:a b", "worker:-x"])
def test_malformed_grants_are_refused(text: str) -> None:
    from tikk.errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        Grant.parse(text)


def test_grants_read_back_as_written() -> None:
    for text in ("read:payments", "admin:*", "worker:emails.v2"):
        assert str(Grant.parse(text)) == text
    assert Grant.parse("write:a").covers(Role.READ, "a")
