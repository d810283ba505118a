"""Hostile text against a real ``tikk dev``: names that hide or reorder characters are refused
naming the code point, a worker's result fields are checked against their caps, what the
server logs of a request is escaped and bounded, what the CLI prints of stored text is
escaped, and an error echoes only a little of its input.

The test reads real deliveries off the embedded queue file like a worker (no worker runs), so
each result it reports carries a token the dispatcher signed.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from tests.deliveries import taken_off_queue
from tests.e2e.conftest import ROOT, Stack
from tikk.v1 import (
    history_pb2,
    schedules_pb2,
    schedules_pb2_grpc,
    tasks_pb2,
    worker_pb2,
    worker_pb2_grpc,
)

pytestmark = pytest.mark.e2e

QUEUE = "hostile"
INVALID = grpc.StatusCode.INVALID_ARGUMENT
TERMINAL = ("\x1b", "\x07", "\r", "\x00", "\u202e")
# What a forged log line would start with, were a newline in a run id written as it came.
FORGED = "2030-01-01 00:00:00,000 CRITICAL tikk.server: disk wiped"


class Hostile:
    """``tikk dev`` (server and dispatcher, no worker) and a channel to it."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.channel = grpc.insecure_channel(stack.address)
        self.worker = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.schedules = schedules_pb2_grpc.ScheduleServiceStub(self.channel)

    def create(self, ns: str, task_id: str = "", **fields: Any) -> tasks_pb2.Task:
        req = tasks_pb2.CreateTaskRequest(
            namespace=ns, task_id=task_id or uuid.uuid4().hex, queue=QUEUE, handler="h"
        )
        for name, value in fields.items():
            if name == "labels":
                req.labels.update(value)
            elif name == "max_attempts":
                req.retry_policy.max_attempts = value
            else:
                setattr(req, name, value)
        task: tasks_pb2.Task = self.stack.tasks.CreateTask(req, timeout=10).task
        return task

    def take(self, task_id: str) -> worker_pb2.Delivery:
        """The delivery of ``task_id`` as the dispatcher published it (committed off the
        queue, so nothing else runs it)."""
        queue_file = self.stack.data_dir / "queue.db"
        return asyncio.run(taken_off_queue(queue_file, QUEUE, [task_id], 30))[task_id]

    def report(self, result: worker_pb2.RunResult) -> worker_pb2.ResultAck:
        batch = worker_pb2.RunResultBatch(results=[result])
        answers = self.worker.ReportResultBatches(iter([batch]), timeout=30)
        [ack] = next(answers).acks
        assert isinstance(ack, worker_pb2.ResultAck)
        return ack

    def lines(self) -> list[str]:
        assert self.stack.server is not None
        return list(self.stack.server.lines)


def result(delivery: worker_pb2.Delivery, **fields: Any) -> worker_pb2.RunResult:
    r = worker_pb2.RunResult(
        run_id=uuid.uuid4().hex, delivery=delivery, kind=worker_pb2.RESULT_KIND_SUCCEEDED,
        worker_id="w1",
    )  # fmt: skip
    for name, value in fields.items():
        setattr(r, name, value)
    r.start_time.FromMilliseconds(delivery.due_time.ToMilliseconds() + 10)
    r.finish_time.FromMilliseconds(delivery.due_time.ToMilliseconds() + 20)
    return r


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    stack = Stack(tmp_path_factory.mktemp("hostile"))
    stack.start_server()
    rig = Hostile(stack)
    yield rig
    rig.channel.close()
    stack.close()


@pytest.fixture
def ns() -> str:
    return "h-" + uuid.uuid4().hex[:12]


def refusal(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


@pytest.mark.parametrize(
    ("fields", "field", "code_point"),
    [
        ({"task_id": "invoice\u202egpj.exe"}, "task_id", "U+202E (a bidi control)"),
        ({"task_id": "pay\u200bment"}, "task_id", "U+200B (an invisible character)"),
        ({"task_id": "\u2066abc"}, "task_id", "U+2066 (a bidi control)"),
        ({"task_id": "bad\u0378id"}, "task_id", "U+0378 (an unassigned code point)"),
        ({"handler": "h\x1b]0;owned\x07"}, "handler", "U+001B (a control character)"),
        ({"handler": "h\x85next"}, "handler", "U+0085 (a control character)"),
        ({"handler": "h\u2028"}, "handler", "U+2028"),
        ({"labels": {"team": "ops\u202e"}}, "labels['team']", "U+202E (a bidi control)"),
        ({"labels": {"team": "\ufeffops"}}, "labels['team']", "U+FEFF (an invisible character)"),
    ],
)  # fmt: skip
def test_names_that_hide_or_reorder_characters_are_refused_naming_the_code_point(
    hostile: Hostile, ns: str, fields: dict[str, Any], field: str, code_point: str
) -> None:
    err = refusal(lambda: hostile.create(ns, **fields))
    assert err.code() is INVALID, err.details()
    details = err.details() or ""
    assert details.startswith(field + ":") and code_point in details, details


def test_printable_text_of_any_script_stays_allowed(hostile: Hostile, ns: str) -> None:
    task = hostile.create(ns, "façade-日本-ü", handler="処理", labels={"who": "Grüße 🙂"})
    assert (task.id, task.handler, dict(task.labels)) == (
        "façade-日本-ü", "処理", {"who": "Grüße 🙂"},
    )  # fmt: skip


def _preview(hostile: Hostile, **spec: Any) -> Callable[[], object]:
    request = schedules_pb2.PreviewScheduleRequest(spec=schedules_pb2.ScheduleSpec(**spec))
    return lambda: hostile.schedules.PreviewSchedule(request, timeout=10)


@pytest.mark.parametrize(
    ("what", "field"),
    [
        ("label key", "labels["),
        ("cron element", "spec.cron"),
        ("cron number", "spec.cron"),
        ("expected version", "expected_version"),
        ("schedule id", "schedule_id"),
    ],
)
def test_an_error_echoes_at_most_a_little_of_a_huge_input(
    hostile: Hostile, ns: str, what: str, field: str
) -> None:
    """A 64 KB value named in an error would make the status too large for the client to
    read (RESOURCE_EXHAUSTED on its side): the error quotes at most 100 characters of it."""
    huge = "k" * 65_536
    calls: dict[str, Callable[[], object]] = {
        "label key": lambda: hostile.create(ns, labels={huge: "v"}),
        "cron element": _preview(hostile, cron=f"{huge} * * * *"),
        "cron number": _preview(hostile, cron=f"{'9' * 5_000} * * * *"),
        "expected version": lambda: hostile.schedules.DeleteSchedule(
            schedules_pb2.DeleteScheduleRequest(
                namespace=ns, schedule_id="s", expected_version=huge
            ),
            timeout=10,
        ),
        "schedule id": lambda: hostile.schedules.GetSchedule(
            schedules_pb2.GetScheduleRequest(namespace=ns, schedule_id=huge), timeout=10
        ),
    }
    err = refusal(calls[what])
    details = err.details() or ""
    assert err.code() is INVALID, (err.code(), details[:300])
    assert details.startswith(field) and len(details) < 400, details[:500]


def test_any_status_message_is_bounded_whatever_built_it(hostile: Hostile, ns: str) -> None:
    """A lookup quotes what it did not find, and no rule caps a run id it is asked for: the
    status itself is bounded and escaped, so the caller still reads NOT_FOUND."""
    wanted = "r\x1b" + "r" * 65_536
    err = refusal(
        lambda: hostile.stack.history.GetRun(
            history_pb2.GetRunRequest(namespace=ns, run_id=wanted), timeout=10
        )
    )
    details = err.details() or ""
    assert err.code() is grpc.StatusCode.NOT_FOUND, (err.code(), details[:300])
    assert len(details) < 1_100 and "\\x1b" in details and "\x1b" not in details


def test_an_interval_of_one_nanosecond_is_refused_naming_the_interval(
    hostile: Hostile, ns: str
) -> None:
    spec = schedules_pb2.ScheduleSpec()
    spec.interval.nanos = 1
    err = refusal(_preview(hostile, interval=spec.interval))
    assert err.code() is INVALID and (err.details() or "").startswith("spec.interval:")
    schedule = schedules_pb2.Schedule(namespace=ns, id="tick", queue=QUEUE, handler="h", spec=spec)
    request = schedules_pb2.CreateScheduleRequest(schedule=schedule)
    err = refusal(lambda: hostile.schedules.CreateSchedule(request, timeout=10))
    assert err.code() is INVALID and (err.details() or "").startswith("spec.interval:")


@pytest.mark.parametrize(
    ("fields", "field", "cap"),
    [
        ({"run_id": "run 1"}, "run_id", "A-Z a-z 0-9"),
        ({"run_id": "r" * 129}, "run_id", "128"),
        ({"worker_id": "w\x1b[2J"}, "worker_id", "U+001B"),
        ({"worker_id": "w" * 129}, "worker_id", "128"),
        ({"error_type": "E" * 257}, "error_type", "256"),
        ({"error_message": "m" * 8_193}, "error_message", "8,192"),
        ({"output": b"o" * (64 * 1024 + 1)}, "output", "65,536"),
    ],
)  # fmt: skip
def test_result_fields_over_their_caps_are_refused_and_change_nothing(
    hostile: Hostile, ns: str, fields: dict[str, Any], field: str, cap: str
) -> None:
    """Refused, not trimmed: the run is not recorded, the task stays dispatched, and the
    same result within the caps is then recorded."""
    task = hostile.create(ns)
    delivery = hostile.take(task.id)
    ack = hostile.report(result(delivery, **fields))
    assert ack.code == INVALID.value[0], ack
    assert ack.message.startswith(field + ":") and cap in ack.message, ack.message[:300]
    runs = hostile.stack.runs(ns, task.id)
    assert runs == [] and hostile.stack.task(ns, task.id).state == tasks_pb2.TASK_STATE_DISPATCHED
    assert hostile.report(result(delivery)).code == grpc.StatusCode.OK.value[0]


def test_a_run_id_forging_a_log_line_is_refused_and_logged_on_one_escaped_line(
    hostile: Hostile, ns: str
) -> None:
    task = hostile.create(ns)
    stolen = hostile.take(task.id)
    stolen.token = ""  # as a forger without the delivery would send it
    ack = hostile.report(result(stolen, run_id="r1\n" + FORGED))
    assert ack.code == INVALID.value[0] and ack.message.startswith("run_id:"), ack
    assert hostile.stack.server is not None
    hostile.stack.server.wait_for(re.compile(re.escape("r1\\n" + FORGED)))
    assert not [line for line in hostile.lines() if line.startswith(FORGED)]


def test_a_two_megabyte_run_id_is_refused_without_a_two_megabyte_log_line(
    hostile: Hostile, ns: str
) -> None:
    task = hostile.create(ns)
    stolen = hostile.take(task.id)
    stolen.token = ""
    ack = hostile.report(result(stolen, run_id="big" + "x" * 2_000_000))
    assert ack.code == INVALID.value[0], ack.message[:300]
    assert ack.message.startswith("run_id:") and len(ack.message) < 400
    assert hostile.stack.server is not None
    hostile.stack.server.wait_for(re.compile(r"bigx+…\([\d,]+ more\)"))
    assert max(len(line) for line in hostile.lines()) < 10_000


def tikk(address: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", *args, "--server", address],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_cli_prints_a_hostile_error_escaped(hostile: Hostile, ns: str) -> None:
    """A worker's error holding terminal controls is stored as it came and shown escaped:
    no line of the text output carries one; ``--json`` gives the text back exactly."""
    task = hostile.create(ns, max_attempts=1)
    delivery = hostile.take(task.id)
    error_type = "Boom\x1b]0;owned\x07"
    message = "\x1b[2J\x1b[H\rall tasks succeeded\x07\x00\u202edone"
    failure = result(
        delivery, kind=worker_pb2.RESULT_KIND_FAILED_PERMANENTLY, error_type=error_type,
        error_message=message,
    )  # fmt: skip
    assert hostile.report(failure).code == grpc.StatusCode.OK.value[0]
    address = hostile.stack.address
    for args in (("dead-letters", "list"), ("runs", "task", task.id)):
        text = tikk(address, *args, "--namespace", ns)
        assert not [c for c in TERMINAL if c in text], text
        assert "Boom\\x1b]0;owned\\x07" in text
        assert "\\x1b[2J\\x1b[H\\rall tasks succeeded\\x07\\x00\\u202edone" in text
    shown = tikk(address, "runs", "task", task.id, "--namespace", ns, "--json")
    assert not [c for c in TERMINAL if c in shown]
    [run] = json.loads(shown)["runs"]
    assert (run["error_type"], run["error_message"]) == (error_type, message)
