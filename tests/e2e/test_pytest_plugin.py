"""The pytest fixture users get for end-to-end tests of their worker
(``worker_sdk.pytest_plugin``), used as they would use it: a typed worker run against the
embedded tikk it starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from tikk.client import TaskSpec
from tikk.v1 import tasks_pb2
from worker_sdk import TaskContext, Worker

if TYPE_CHECKING:  # imported by pytest itself, below, so that its asserts are rewritten
    from worker_sdk.pytest_plugin import TikkDev

pytest_plugins = ["worker_sdk.pytest_plugin"]
pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Greeting:
    name: str


worker = Worker(["greetings"], concurrency=2)


@worker.handler("greet")
async def greet(ctx: TaskContext, payload: Greeting) -> str:
    return f"hello, {payload.name}"


async def test_a_users_worker_runs_its_tasks_against_the_fixtures_tikk(tikk_dev: TikkDev) -> None:
    with tikk_dev.client() as client:
        client.create_task(TaskSpec("greetings", "greet", Greeting("Ada"), task_id="g-1"))
        client.create_task(TaskSpec("greetings", "greet", {"nom": "Ada"}, task_id="g-2"))
    done = await tikk_dev.work(
        worker, until=lambda: tikk_dev.finished("g-1") and tikk_dev.finished("g-2")
    )
    assert done == 2
    assert tikk_dev.task("g-1").state == tasks_pb2.TASK_STATE_SUCCEEDED
    bad = tikk_dev.task("g-2")
    assert bad.state == tasks_pb2.TASK_STATE_DEAD_LETTERED
    assert bad.last_error_type == "InvalidPayload"
    with tikk_dev.client() as client:
        (run,) = list(client.list_task_runs("g-1"))
    assert run.output == b"hello, Ada"
