"""Bad queues are isolated: names that would collide on Kafka are refused, a queue is made
before a task of it is accepted (or the create fails and nothing is stored), and a queue
nobody consumes shows up with what waits in it.

Real processes: ``tikk dev`` with the embedded queue, with the real Kafka, and with a Kafka
that cannot be reached; ``tikk worker`` consuming the queue ``e2e`` only.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from tests.e2e.conftest import ROOT, Process, Stack
from tests.services import KAFKA, kafka_options, require, with_login
from tests.waiting import eventually
from tikk.v1 import schedules_pb2, schedules_pb2_grpc, tasks_pb2, tasks_pb2_grpc

pytestmark = pytest.mark.e2e
_LISTENING = re.compile(r"listening on [\d.]+:(\d+)")
T = TypeVar("T")


def create(tasks: Any, ns: str, queue: str, task_id: str = "") -> tasks_pb2.CreateTaskResponse:
    req = tasks_pb2.CreateTaskRequest(
        namespace=ns, task_id=task_id, queue=queue, handler="record", payload=b"x"
    )
    resp: tasks_pb2.CreateTaskResponse = tasks.CreateTask(req, timeout=30)
    return resp


def failure(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """The status code and message of a call that must fail."""
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code(), err.value.details() or ""


def refused(tasks: Any, ns: str, queue: str, task_id: str = "") -> tuple[grpc.StatusCode, str]:
    return failure(lambda: create(tasks, ns, queue, task_id))


def stored(tasks: Any, ns: str, task_id: str) -> bool:
    try:
        state(tasks, ns, task_id)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
        return False
    return True


def bulk(tasks: Any, ns: str, queues: list[str]) -> tasks_pb2.CreateTasksResponse:
    """One CreateTasks chunk with a task in each of ``queues`` (ids b0, b1, ...)."""
    items = [
        tasks_pb2.CreateTaskRequest(namespace=ns, queue=q, handler="record", task_id=f"b{i}")
        for i, q in enumerate(queues)
    ]
    resp: tasks_pb2.CreateTasksResponse = tasks.CreateTasks(
        iter([tasks_pb2.CreateTasksRequest(tasks=items)]), timeout=30
    )
    return resp


def create_schedule(channel: grpc.Channel, ns: str, queue: str) -> schedules_pb2.Schedule:
    schedule = schedules_pb2.Schedule(
        namespace=ns, id="hourly", queue=queue, handler="record",
        spec=schedules_pb2.ScheduleSpec(cron="0 * * * *"),
    )  # fmt: skip
    created: schedules_pb2.Schedule = schedules_pb2_grpc.ScheduleServiceStub(
        channel
    ).CreateSchedule(schedules_pb2.CreateScheduleRequest(schedule=schedule), timeout=30)
    return created


def queues(tasks: Any) -> dict[str, tasks_pb2.QueueInfo]:
    resp = tasks.ListQueues(tasks_pb2.ListQueuesRequest(), timeout=30)
    return {q.name: q for q in resp.queues}


def state(tasks: Any, ns: str, task_id: str) -> int:
    task: tasks_pb2.Task = tasks.GetTask(
        tasks_pb2.GetTaskRequest(namespace=ns, task_id=task_id), timeout=10
    )
    return task.state


def tikk_json(address: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", *args, "--server", address, "--json"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=30,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# The embedded queue.


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("queues"))
    s.start_server()
    s.start_worker()
    yield s
    s.close()


def test_a_queue_name_with_a_dot_is_refused_everywhere_it_enters(stack: Stack, ns: str) -> None:
    code, message = refused(stack.tasks, ns, "a.b", "dotted")
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message.startswith("queue: may contain only A-Z a-z 0-9 _ -")
    assert refused(stack.tasks, ns, "x_dlq")[0] == grpc.StatusCode.INVALID_ARGUMENT
    resp = bulk(stack.tasks, ns, ["e2e", "a.b", "e2e"])
    assert (resp.accepted, resp.rejected) == (2, 1)
    assert resp.results[1].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    with grpc.insecure_channel(stack.address) as channel:
        code, message = failure(lambda: create_schedule(channel, ns, "a.b"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("schedule.queue: ")
    # Tasks stored under such names by older versions can still be listed.
    listed = stack.tasks.ListTasks(tasks_pb2.ListTasksRequest(namespace=ns, queue="a.b"))
    assert list(listed.tasks) == []


def test_a_queue_nobody_consumes_is_listed_with_its_backlog(stack: Stack, ns: str) -> None:
    create(stack.tasks, ns, "nobody-reads-this", "stuck")
    create(stack.tasks, ns, "e2e", "runs")
    eventually(lambda: state(stack.tasks, ns, "runs") == tasks_pb2.TASK_STATE_SUCCEEDED)
    stuck = eventually(lambda: queues(stack.tasks).get("nobody-reads-this"))
    assert stuck.waiting == 1 and stuck.HasField("oldest_waiting_age")
    assert not stuck.HasField("consumers")  # the embedded queue cannot tell
    assert state(stack.tasks, ns, "stuck") == tasks_pb2.TASK_STATE_DISPATCHED
    assert eventually(lambda: queues(stack.tasks)["e2e"].waiting == 0)
    by_name = {q["name"]: q for q in tikk_json(stack.address, "queues", "list")["queues"]}
    assert by_name["nobody-reads-this"]["waiting"] == "1"  # int64 is a string in JSON


def test_the_queue_listing_pages_in_name_order(stack: Stack, ns: str) -> None:
    for queue in ("page-a", "page-b", "page-c"):
        create(stack.tasks, ns, queue)
    names: list[str] = []
    token = ""
    while True:
        req = tasks_pb2.ListQueuesRequest(page_size=2, page_token=token)
        page = stack.tasks.ListQueues(req, timeout=30)
        names += [q.name for q in page.queues]
        if not (token := page.next_page_token):
            break
    assert names == sorted(names) and {"page-a", "page-b", "page-c"} <= set(names)
    bad = tasks_pb2.ListQueuesRequest(page_token="not-a-token")
    code, message = failure(lambda: stack.tasks.ListQueues(bad, timeout=30))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("page_token")


# The real Kafka, and one that cannot be reached.


def start_dev(tmp: Path, queue_url: str, worker: bool) -> tuple[str, list[Process]]:
    env = {"TIKK_E2E_LOG": str(tmp / "executions.jsonl"), "PYTHONUNBUFFERED": "1"}
    args = ["--data-dir", str(tmp), "--shards", "8", "--queue", queue_url]
    server = Process(["dev", *args, "--listen", "127.0.0.1:0"], env)
    address = f"127.0.0.1:{server.wait_for(_LISTENING).group(1)}"
    if not worker:
        return address, [server]
    w = Process(["worker", "tests.e2e.worker_app:worker", "--server", address], env)
    return address, [w, server]


def kafka_admin(action: Callable[[Any], Awaitable[T]]) -> T:
    """``action(admin)`` against the real Kafka, with an admin client of its own."""
    from aiokafka.admin import AIOKafkaAdminClient

    async def run() -> T:
        admin = AIOKafkaAdminClient(**kafka_options())
        await admin.start()
        try:
            return await action(admin)
        finally:
            await admin.close()

    return asyncio.run(run())


def topics_under(prefix: str) -> list[str]:
    async def listed(admin: Any) -> list[str]:
        return sorted(t for t in await admin.list_topics() if t.startswith(prefix))

    return kafka_admin(listed)


@dataclass
class OnKafka:
    channel: grpc.Channel
    prefix: str

    @property
    def tasks(self) -> Any:
        return tasks_pb2_grpc.TaskServiceStub(self.channel)


@pytest.fixture(scope="module")
def on_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnKafka]:
    """``tikk dev`` and a worker on the real Kafka, under topics of their own."""
    require("kafka", KAFKA)
    prefix = f"e2eq{uuid.uuid4().hex[:8]}."
    url = with_login(f"kafka://{KAFKA}?prefix={prefix}&partitions=2")
    address, processes = start_dev(tmp_path_factory.mktemp("kafka"), url, worker=True)
    with grpc.insecure_channel(address) as channel:
        yield OnKafka(channel, prefix)
    for p in processes:
        p.stop()
    leftover = topics_under(prefix)
    if leftover:
        kafka_admin(lambda admin: admin.delete_topics(leftover))


def test_on_kafka_a_name_colliding_with_an_old_topic_is_refused_and_not_stored(
    on_kafka: OnKafka, ns: str
) -> None:
    from aiokafka.admin import NewTopic

    async def old_topic(admin: Any) -> None:  # left by an older version, which allowed "."
        await admin.create_topics([NewTopic(f"{on_kafka.prefix}a.b", 2, 1)])

    kafka_admin(old_topic)
    code, message = refused(on_kafka.tasks, ns, "a_b", "collides")
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{on_kafka.prefix}a_b" in message and "collides" in message
    assert not stored(on_kafka.tasks, ns, "collides")
    resp = bulk(on_kafka.tasks, ns, ["e2e", "a_b", "e2e"])
    assert (resp.accepted, resp.rejected) == (2, 1)  # only the colliding queue's item
    assert resp.results[1].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "a.b" in queues(on_kafka.tasks)  # the old queue's topic is listed


def test_on_kafka_a_queue_nobody_consumes_is_listed_while_others_run(
    on_kafka: OnKafka, ns: str
) -> None:
    create(on_kafka.tasks, ns, "e2e", "flows")
    create(on_kafka.tasks, ns, "nobody-reads-this", "stuck")
    eventually(lambda: state(on_kafka.tasks, ns, "flows") == tasks_pb2.TASK_STATE_SUCCEEDED)
    # The queue is listed once its task is accepted, and waits once the dispatcher published
    # it: wait for the second, not the first.
    stuck = eventually(
        lambda: (q := queues(on_kafka.tasks).get("nobody-reads-this")) and q.waiting and q
    )
    assert (stuck.waiting, stuck.consumers) == (1, 0) and stuck.HasField("oldest_waiting_age")
    e2e = eventually(lambda: (q := queues(on_kafka.tasks)["e2e"]).waiting == 0 and q)
    assert e2e.consumers == 1


def test_on_kafka_creating_a_schedule_makes_its_queue(on_kafka: OnKafka, ns: str) -> None:
    create_schedule(on_kafka.channel, ns, "from-a-schedule")
    queue = f"{on_kafka.prefix}from-a-schedule"
    assert topics_under(queue) == [queue, f"{queue}.dlq"]


@pytest.fixture(scope="module")
def without_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[grpc.Channel]:
    """A channel to ``tikk dev`` configured with a Kafka that cannot be reached."""
    tmp = tmp_path_factory.mktemp("no-kafka")
    address, processes = start_dev(tmp, "kafka://127.0.0.1:1?prefix=gone.", worker=False)
    with grpc.insecure_channel(address) as channel:
        yield channel
    for p in processes:
        p.stop()


def test_when_kafka_cannot_be_reached_a_create_is_unavailable_and_nothing_is_stored(
    without_kafka: grpc.Channel, ns: str
) -> None:
    tasks = tasks_pb2_grpc.TaskServiceStub(without_kafka)
    assert refused(tasks, ns, "e2e", "lost")[0] == grpc.StatusCode.UNAVAILABLE
    assert not stored(tasks, ns, "lost")
    resp = bulk(tasks, ns, ["e2e"])
    assert (resp.accepted, resp.rejected) == (0, 1)
    assert (resp.results[0].code, resp.results[0].task_id) == (
        grpc.StatusCode.UNAVAILABLE.value[0],
        "b0",
    )
    assert not stored(tasks, ns, "b0")


def test_when_kafka_cannot_be_reached_a_schedule_is_not_stored_either(
    without_kafka: grpc.Channel, ns: str
) -> None:
    code, _ = failure(lambda: create_schedule(without_kafka, ns, "e2e"))
    assert code == grpc.StatusCode.UNAVAILABLE
    key = schedules_pb2.GetScheduleRequest(namespace=ns, schedule_id="hourly")
    schedules = schedules_pb2_grpc.ScheduleServiceStub(without_kafka)
    code, _ = failure(lambda: schedules.GetSchedule(key, timeout=30))
    assert code == grpc.StatusCode.NOT_FOUND
