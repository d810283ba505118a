"""The Python client given two real servers (``tikk server`` processes sharing one embedded
data directory, ``tests/e2e/cluster.py``): calls are spread over both, a server that is
``kill -9``ed is skipped, a call that was on it is sent again to the other only when that is
safe (a read, a create with a task id, a cancel), and one that is not (a create without an id)
is raised, never repeated. Nothing is created twice. The import streams stay as documented: a
broken ``ImportTasks`` is resumed on the other server and creates nothing twice, and a broken
``CreateTasks`` is an error, resent whole with its ids."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import grpc
import pytest

from server.cli.options import EXIT_OK, EXIT_UNREACHABLE
from tests.e2e.cluster import Cluster
from tests.e2e.conftest import ROOT
from tests.waiting import eventually
from tikk.client import (
    AsyncClient,
    Client,
    DeadlineExceededError,
    ImportInterrupted,
    ImportResult,
    NotFoundError,
    TaskSelection,
    TaskSpec,
    Transport,
    UnavailableError,
)
from tikk.timestamps import to_timestamp
from tikk.v1 import tasks_pb2, tasks_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

QUEUE = "parked"
LATER = datetime.now(tz=UTC).replace(microsecond=0) + timedelta(days=365)
# How long calls are left with a paused server: they are sent, and wait there. The time is
# the point (there is no state to wait for: the server answers nothing while paused).
IN_FLIGHT_S = 1.0
# Calls of each kind sent while one of two servers is paused: round robin gives it every
# other one, so about half of each kind wait there.
IN_FLIGHT_CALLS = 8


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    servers = Cluster(tmp_path, dispatcher=False)
    servers.start()
    yield servers
    servers.close()


def later(task_id: str = "") -> TaskSpec:
    return TaskSpec(QUEUE, "record", b"x", task_id=task_id, run_at=LATER)


def stored(client: Client) -> int:
    """How many tasks the client's namespace holds in ``QUEUE``."""
    return int(client.count_tasks(TaskSelection(queue=QUEUE)).count)


def warm(client: Client) -> None:
    """A few reads, so that the channel has connected to both servers (round robin starts
    sending as soon as one answers)."""
    for _ in range(6):
        with pytest.raises(NotFoundError):
            client.get_task("warm-up")


def test_calls_are_spread_over_the_servers(cluster: Cluster) -> None:
    """With one server paused, every other call waits on it: the calls go to both."""
    with Client(cluster.target, namespace="spread", timeout=0.5, retry=None) as client:
        warm(client)
        cluster.pause(1)
        answered = waited = 0
        for _ in range(10):
            try:
                client.get_task("nothing")
            except NotFoundError:
                answered += 1
            except DeadlineExceededError:
                waited += 1
        cluster.kill9(1)
        # Now the dead server is skipped: every call is answered.
        for _ in range(10):
            with pytest.raises(NotFoundError):
                client.get_task("nothing")
    print(f"answered {answered}, waited on the paused server {waited}")
    assert answered >= 3 and waited >= 3, (answered, waited)


def send_in_flight(pool: ThreadPoolExecutor, client: Client) -> dict[str, Future[object]]:
    """Creates with and without a task id, and cancels of tasks that exist, all at once."""
    calls: dict[str, Future[object]] = {}
    for n in range(IN_FLIGHT_CALLS):
        one_round: list[tuple[str, Callable[[], object]]] = [
            (f"with-id-{n}", partial(client.create_task, later(f"with-id-{n}"))),
            (f"without-id-{n}", partial(client.create_task, later())),
            (f"cancel-{n}", partial(client.cancel_task, f"to-cancel-{n}")),
            (f"get-{n}", partial(client.get_task, f"to-cancel-{n}")),
        ]
        # Round robin alternates strictly: every other round in another order, so that each
        # kind of call goes to both servers.
        if n % 2:
            one_round = [one_round[1], one_round[0], one_round[3], one_round[2]]
        calls.update((name, pool.submit(call)) for name, call in one_round)
    return calls


# A server killed resets its connections; one that hangs (a process stuck, a host gone
# without a word) is left once the client's pings go unanswered (``tikk.client.server_list``).
@pytest.mark.parametrize("fault", ["kill9", "hang"])
def test_calls_on_a_lost_server_move_only_when_safe(cluster: Cluster, fault: str) -> None:
    """Calls sent to a paused server, which is then killed (or left paused): the reads, the
    creates with an id and the cancels are answered by the other server, each create stored
    once; each create without an id that was on the lost server is raised, and not stored."""
    with Client(cluster.target, namespace="in-flight", timeout=30) as client:
        warm(client)
        for n in range(IN_FLIGHT_CALLS):
            client.create_task(later(f"to-cancel-{n}"))
        cluster.pause(1)
        with ThreadPoolExecutor(max_workers=4 * IN_FLIGHT_CALLS) as pool:
            calls = send_in_flight(pool, client)
            time.sleep(IN_FLIGHT_S)  # the calls wait on the paused server meanwhile
            waiting = [name for name, call in calls.items() if not call.done()]
            killed_at = time.monotonic()
            if fault == "kill9":
                cluster.kill9(1)
            finished = {name: _outcome(call) for name, call in calls.items()}
            moved_s = time.monotonic() - killed_at
        raised = sorted(name for name, outcome in finished.items() if outcome is not None)
        created_without_id = sum(
            1 for name, outcome in finished.items() if name.startswith("without") and not outcome
        )
        tasks = stored(client)
        cancelled = [client.get_task(f"to-cancel-{n}").state for n in range(IN_FLIGHT_CALLS)]
    print(
        f"{len(waiting)} calls waited on the paused server; all settled {moved_s:.2f} s "
        f"after the {fault}; raised: {raised}"
    )
    assert any(name.startswith("with-id") for name in waiting), waiting
    assert any(name.startswith("without") for name in waiting), waiting
    assert raised, "a create without an id that was on the dead server must be raised"
    assert all(name.startswith("without") for name in raised), raised
    assert set(raised) <= set(waiting), (raised, waiting)
    assert all(finished[name] is UnavailableError for name in raised), finished
    # Every task with an id once, the cancelled ones included; without: only those answered.
    assert tasks == 2 * IN_FLIGHT_CALLS + created_without_id, (tasks, created_without_id)
    assert set(cancelled) == {tasks_pb2.TASK_STATE_CANCELLED}, cancelled


def _outcome(call: Future[object]) -> type[BaseException] | None:
    """None if the call succeeded, else the class of what it raised."""
    error = call.exception(timeout=60)
    return None if error is None else type(error)


def test_calls_keep_working_through_a_kill9(cluster: Cluster) -> None:
    """A stream of reads, creates with ids and cancels while one server is killed: none
    fails, and each task is stored once. Prints how long the slowest call took."""
    done = threading.Event()
    latencies: list[float] = []

    def traffic(client: Client) -> int:
        n = 0
        while not done.is_set() or n < 40:
            began = time.monotonic()
            assert client.create_task(later(f"t-{n}")).created
            client.get_task(f"t-{n}")
            client.cancel_task(f"t-{n}")
            latencies.append(time.monotonic() - began)
            n += 1
        return n

    with Client(cluster.target, namespace="steady", timeout=30) as client:
        warm(client)
        with ThreadPoolExecutor(max_workers=1) as pool:
            sent = pool.submit(traffic, client)
            eventually(lambda: len(latencies) >= 20, 60)
            cluster.kill9(0)
            at_kill = len(latencies)
            eventually(lambda: len(latencies) >= at_kill + 20, 60)
            done.set()
            count = sent.result(timeout=60)
        assert stored(client) == count
        states = {t.state for t in client.list_tasks(QUEUE)}
    print(
        f"{count} rounds; slowest {max(latencies):.3f} s, after the kill "
        f"{max(latencies[at_kill - 1 :]):.3f} s"
    )
    assert states == {tasks_pb2.TASK_STATE_CANCELLED}


def test_the_async_client_skips_a_killed_server(cluster: Cluster) -> None:
    async def main() -> None:
        async with AsyncClient(cluster.target, namespace="async", timeout=30) as client:
            for n in range(4):
                await client.create_task(later(f"a-{n}"))
            cluster.kill9(1)
            for n in range(4, 12):
                assert (await client.create_task(later(f"a-{n}"))).created
                await client.get_task(f"a-{n}")
                await client.cancel_task(f"a-{n - 4}")
            assert (await client.count_tasks(TaskSelection(queue=QUEUE))).count == 12

    asyncio.run(main())


def test_an_import_broken_by_a_kill9_resumes_on_the_other_server(cluster: Cluster) -> None:
    """Server 1 is paused while the client connects, so the stream goes to server 0; that one
    is killed once batches were answered. The import says where to resume, the resumed
    import goes to server 1, and every task is stored once. A resume sent in the instant
    after the kill may still meet the dead connection (gRPC has not yet marked it lost) and
    break again with nothing answered; it is resumed again, as the README says to."""
    gate = threading.Event()
    total, first_part = 3_000, 1_000

    def items(start: int) -> Iterator[TaskSpec]:
        for n in range(start, total):
            if n == first_part and start == 0:
                gate.wait(60)  # the stream stays open, with results in, until the kill
            yield later(f"i-{n}")

    cluster.pause(1)
    with Client(cluster.target, namespace="import", timeout=30) as client:
        results = []
        with pytest.raises(ImportInterrupted) as broken:
            for result in client.import_tasks(items(0), batch_size=250):
                results.append(result)
                if len(results) == first_part:
                    cluster.resume(1)
                    cluster.kill9(0)
                    gate.set()
        resume_at = broken.value.next_index
        resumed, attempts = resume_import(client, items, resume_at)
        assert stored(client) == total
    assert resume_at == len(results) >= first_part
    assert attempts <= 3, f"the import was resumed {attempts} times"
    assert [r.index for r in results + resumed] == list(range(total))
    assert all(r.ok for r in results + resumed)
    assert sum(r.created for r in results + resumed) <= total


def resume_import(
    client: Client, items: Callable[[int], Iterator[TaskSpec]], at: int
) -> tuple[list[ImportResult], int]:
    """The rest of a broken import from ``at``, resumed again each time it breaks (at most
    five times); its results and how many imports that took."""
    results: list[ImportResult] = []
    for attempt in range(1, 6):
        try:
            for result in client.import_tasks(items(at), batch_size=250, first_index=at):
                results.append(result)
            return results, attempt
        except ImportInterrupted as broken:
            at = broken.next_index
    raise AssertionError(f"the import broke five times; {len(results)} items answered")


def create_request(task_id: str) -> tasks_pb2.CreateTaskRequest:
    return tasks_pb2.CreateTaskRequest(
        namespace="create",
        task_id=task_id,
        queue=QUEUE,
        handler="record",
        payload=b"x",
        run_at=to_timestamp(int(LATER.timestamp() * 1000)),
    )


def exists(client: Client, task_id: str) -> bool:
    try:
        client.get_task(task_id)
    except NotFoundError:
        return False
    return True


def test_a_create_stream_broken_by_a_kill9_is_an_error_and_resent_whole(
    cluster: Cluster,
) -> None:
    """``CreateTasks`` answers once, at its end: broken mid-stream it is UNAVAILABLE (nothing
    answered as done), and sent again with the same ids (to the other server) every task is
    accepted, those the first stream stored as not created."""
    gate = threading.Event()
    batches = [
        tasks_pb2.CreateTasksRequest(tasks=[create_request(f"c-{b}-{n}") for n in range(100)])
        for b in range(3)
    ]

    def first_then_wait() -> Iterator[tasks_pb2.CreateTasksRequest]:
        yield batches[0]
        gate.wait(60)  # the stream stays open after its first batch, until the kill
        yield from batches[1:]

    cluster.pause(1)  # while the channel connects: the stream goes to server 0
    channel = Transport().channel(cluster.target)
    stub = tasks_pb2_grpc.TaskServiceStub(channel)
    with (
        Client(cluster.addresses[0], namespace="create", timeout=30) as first,
        ThreadPoolExecutor(1) as pool,
    ):
        sent = pool.submit(stub.CreateTasks, first_then_wait(), timeout=60)
        eventually(lambda: exists(first, "c-0-99"), 30)
        cluster.resume(1)
        cluster.kill9(0)
        gate.set()
        with pytest.raises(grpc.RpcError) as broken:
            sent.result(timeout=60)
    assert broken.value.code() is grpc.StatusCode.UNAVAILABLE
    again = stub.CreateTasks(iter(batches), timeout=60)
    channel.close()
    assert (again.accepted, again.rejected) == (300, 0)
    assert [r.created for r in again.results] == [False] * 100 + [True] * 200


def tikk(server: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``tikk ARGS`` given ``server`` through ``$TIKK_SERVER``."""
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args, "--namespace", "cli"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "TIKK_SERVER": server},
    )


def test_the_cli_given_both_servers_works_with_one_killed(cluster: Cluster) -> None:
    """``$TIKK_SERVER`` with both servers: once one is killed, creates (with an id, sent
    twice, and without), reads, listings and cancels still answer, each task stored once;
    with both killed a command fails at once as unreachable."""
    create = ("task", "create", "--queue", QUEUE, "--handler", "record", "--in", "1d", "--json")
    assert tikk(cluster.target, *create, "--id", "cli-1").returncode == EXIT_OK
    cluster.kill9(0)
    answers = [
        tikk(cluster.target, *create, "--id", "cli-2"),
        tikk(cluster.target, *create, "--id", "cli-2"),
        tikk(cluster.target, *create),
        tikk(cluster.target, "task", "get", "cli-1"),
        tikk(cluster.target, "task", "cancel", "cli-1"),
        tikk(cluster.target, "task", "list", "--queue", QUEUE, "--json"),
    ]
    assert [a.returncode for a in answers] == [EXIT_OK] * len(answers), [a.stderr for a in answers]
    assert [json.loads(a.stdout).get("created", False) for a in answers[:3]] == [True, False, True]
    listed = json.loads(answers[-1].stdout)["tasks"]
    assert sorted(t["id"] for t in listed if t["id"].startswith("cli-")) == ["cli-1", "cli-2"]
    assert len(listed) == 3
    cluster.kill9(1)
    began = time.monotonic()
    gone = tikk(cluster.target, "task", "get", "cli-1")
    print(f"with both servers killed, tikk task get failed in {time.monotonic() - began:.2f} s")
    assert gone.returncode == EXIT_UNREACHABLE, gone.stderr
