"""What the client commands print and send, against a stand-in server with fixed answers: the
text and ``--json`` outputs, the requests (quota set reads, then writes whole), and the exit
code and message of a refusal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.json_format import MessageToDict

from server.cli import main
from server.cli.options import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE
from tikk.timestamps import to_duration, to_timestamp
from tikk.v1 import admin_pb2, history_pb2, schedules_pb2, tasks_pb2

DUE = 1_893_456_000_123  # 2030-01-01T00:00:00.123Z


def _task(task_id: str, state: str, error: str = "") -> tasks_pb2.Task:
    return tasks_pb2.Task(
        id=task_id, queue="q", handler="h", state=state, attempt=2, due_time=to_timestamp(DUE),
        last_error_type=error, last_error_message="boom" if error else "",
    )  # fmt: skip


ANSWERS: dict[str, Callable[[], Any]] = {
    "CreateTask": lambda: tasks_pb2.CreateTaskResponse(
        task=_task("t1", "TASK_STATE_SCHEDULED"), created=True
    ),
    "ListTasks": lambda: tasks_pb2.ListTasksResponse(
        tasks=[_task("t1", "TASK_STATE_SCHEDULED"), _task("t2", "TASK_STATE_SUCCEEDED", "E")],
        next_page_token="tok",
    ),
    "ListQueues": lambda: tasks_pb2.ListQueuesResponse(
        queues=[
            tasks_pb2.QueueInfo(
                name="a", waiting=3, oldest_waiting_age=to_duration(1500), consumers=2
            ),
            tasks_pb2.QueueInfo(name="b"),
            tasks_pb2.QueueInfo(
                name="c",
                paused=True,
                held=10_000,
                held_more=True,
                max_per_second=2.5,
                skip_older_than=to_duration(600_000),
            ),
        ]
    ),
    "ListDeadLetters": history_pb2.ListDeadLettersResponse,
    "BackfillSchedule": lambda: schedules_pb2.BackfillScheduleResponse(created=3),
    "DeleteSchedule": schedules_pb2.DeleteScheduleResponse,
    "GetNamespaceQuotas": lambda: admin_pb2.NamespaceQuotasResponse(
        namespace="ns", quotas=admin_pb2.Quotas(tasks_stored=4, schedules=10)
    ),
    "SetNamespaceQuotas": lambda: admin_pb2.NamespaceQuotasResponse(
        namespace="ns",
        quotas=admin_pb2.Quotas(schedules=10),
        effective=admin_pb2.Quotas(schedules=10, tasks_per_second=1000),
        usage=admin_pb2.Usage(tasks_stored=12345),
    ),
}


class _StandIn:
    """Answers each method from ``ANSWERS`` (or fails every call with ``refusal``) and
    records what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.refusal: grpc.StatusCode | None = None

    def handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        found = []
        for module in (tasks_pb2, history_pb2, schedules_pb2, admin_pb2):
            for service in module.DESCRIPTOR.services_by_name.values():
                methods = {m.name: self._method(m) for m in service.methods}
                found.append(grpc.method_handlers_generic_handler(service.full_name, methods))
        return found

    def _method(self, method: Any) -> grpc.RpcMethodHandler[Any, Any]:
        name, request = method.name, message_factory.GetMessageClass(method.input_type)

        def answer(message: Any, context: grpc.ServicerContext) -> Any:
            self.sent.append((name, MessageToDict(message, preserving_proto_field_name=True)))
            if self.refusal is not None:
                context.abort(self.refusal, f"refused {name}")
            return ANSWERS[name]()

        return grpc.unary_unary_rpc_method_handler(
            answer, request_deserializer=request.FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )  # fmt: skip


@pytest.fixture(scope="module")
def stand_in() -> Iterator[tuple[str, _StandIn]]:
    handler = _StandIn()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers(handler.handlers())
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", handler
    server.stop(None)


def tikk(
    stand_in: tuple[str, _StandIn], capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str, list[tuple[str, dict[str, Any]]]]:
    address, handler = stand_in
    handler.sent.clear()
    code = main([*args, "--server", address])
    out, err = capsys.readouterr()
    return code, out, err, list(handler.sent)


QUEUES = """\
queue                              waiting     oldest consumers  state      held     rate     skip
a                                        3       1.5s         2  active        0        -        -
b                                        0          -         ?  active        0        -        -
c                                        0          -         ?  paused  10,000+    2.5/s      10m
"""
TASKS = """\
t1  scheduled     q/h  attempt 2  due 2030-01-01T00:00:00.123+00:00
t2  succeeded     q/h  attempt 2  due 2030-01-01T00:00:00.123+00:00  error E: boom
(more: --page-token tok)
"""


@pytest.mark.parametrize(
    ("args", "printed"),
    [
        (["task", "list", "--queue", "q"], TASKS),
        (["queues", "list"], QUEUES),
        (["dead-letters", "list"], "(none)\n"),
        (["schedule", "delete", "s1"], "deleted s1\n"),
        (["schedule", "backfill", "s1", "--start", "2026-03-01T00:00:00",
          "--end", "2026-03-02T00:00:00", "--json"], '{\n  "created": "3"\n}\n'),
        (["schedule", "delete", "s1", "--json"], "{}\n"),
    ],
)  # fmt: skip
def test_the_text_and_json_of_an_answer(
    stand_in: tuple[str, _StandIn],
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    printed: str,
) -> None:
    code, out, err, _ = tikk(stand_in, capsys, *args)
    assert (code, out, err) == (EXIT_OK, printed, "")


def test_json_prints_the_whole_answer_even_where_the_client_unwraps_it(
    stand_in: tuple[str, _StandIn], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["task", "create", "--queue", "q", "--handler", "h", "--id", "t1", "--json", "--at",
            "2030-01-01T00:00:00.123", "--max-attempts", "0", "--label", "a=b=c"]  # fmt: skip
    code, out, _, sent = tikk(stand_in, capsys, *args)
    assert code == EXIT_OK
    assert out.startswith('{\n  "task": {\n    "id": "t1",') and '"created": true' in out
    assert sent == [("CreateTask", {
        "task_id": "t1", "queue": "q", "handler": "h", "labels": {"a": "b=c"},
        "run_at": "2030-01-01T00:00:00.123Z", "retry_policy": {"max_attempts": 0},
    })]  # fmt: skip


def test_a_listing_shows_the_page_it_is_asked_for(
    stand_in: tuple[str, _StandIn], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["task", "list", "--queue", "q", "--state", "dead_lettered", "--limit", "7",
            "--page-token", "abc", "--namespace", "ns"]  # fmt: skip
    *_, sent = tikk(stand_in, capsys, *args)
    assert sent == [("ListTasks", {
        "namespace": "ns", "queue": "q", "state": "TASK_STATE_DEAD_LETTERED", "page_size": 7,
        "page_token": "abc",
    })]  # fmt: skip


def test_quota_set_reads_the_quotas_then_writes_them_whole(
    stand_in: tuple[str, _StandIn], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["quota", "set", "--namespace", "ns", "--tasks-stored", "none", "--import-streams", "0"]
    code, out, _, sent = tikk(stand_in, capsys, *args)
    assert sent == [
        ("GetNamespaceQuotas", {"namespace": "ns"}),
        ("SetNamespaceQuotas", {"namespace": "ns",
                                "quotas": {"schedules": "10", "import_streams": "0"}}),
    ]  # fmt: skip
    assert (code, out) == (EXIT_OK, """\
namespace ns
  tasks_per_second          1,000  (server default)
  tasks_stored              unlimited  (server default)
  schedules                 10
  import_streams            unlimited  (server default)
  task_retention_seconds    as stored  (server default)
  history_retention_seconds as stored  (server default)
  usage: tasks_stored 12,345
""")  # fmt: skip


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (grpc.StatusCode.NOT_FOUND, EXIT_REFUSED),
        (grpc.StatusCode.DEADLINE_EXCEEDED, EXIT_REFUSED),
        (grpc.StatusCode.UNAVAILABLE, EXIT_UNREACHABLE),
    ],
)
def test_a_refusal_is_one_line_and_its_exit_code(
    stand_in: tuple[str, _StandIn],
    capsys: pytest.CaptureFixture[str],
    status: grpc.StatusCode,
    code: int,
) -> None:
    stand_in[1].refusal = status
    try:
        done, out, err, sent = tikk(stand_in, capsys, "queues", "list")
    finally:
        stand_in[1].refusal = None
    assert (done, out, err) == (code, "", f"tikk: {status.name}: refused ListQueues\n")
    assert len(sent) == 1  # sent once: the CLI does not retry
