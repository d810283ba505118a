"""A page of run history fits in one answer a client takes: runs carry up to 64 KiB of output
and 16 KiB of traceback, so a page of a thousand could pass both the server's 16 MiB send
limit and a gRPC client's default 4 MiB receive limit, and fail whole. The history RPCs give
such pages fewer runs (a page may be short; its token goes on), and every run is still
listed once."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.embedded_api import Served, embedded_api, embedded_settings
from tests.factories import T0, make_run
from tikk.model import RunStatus
from tikk.timestamps import to_timestamp
from tikk.v1 import history_pb2, history_pb2_grpc

RUNS = 300


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with embedded_api(embedded_settings(tmp_path)) as s:
        heavy = [
            dataclasses.replace(
                make_run(f"r{i:03}", finished_ms=T0 + i, status=RunStatus.FAILED),
                output=b"o" * 64 * 1024, traceback="t" * 16 * 1024,
            )
            for i in range(RUNS)
        ]  # fmt: skip
        await s.backends.history.append_many(heavy)
        yield s


async def every_page(call: Any, request: Any) -> list[str]:
    ids: list[str] = []
    while True:
        page = await call(request)
        assert page.ByteSize() < 4 * 1024 * 1024  # what a gRPC client takes by default
        ids += [r.run_id for r in page.runs]
        if not page.next_page_token:
            return ids
        request.page_token = page.next_page_token


async def test_heavy_runs_come_in_pages_that_fit_an_answer(served: Served) -> None:
    stub = history_pb2_grpc.HistoryServiceStub(served.channel)
    by_task = history_pb2.ListTaskRunsRequest(namespace="default", task_id="t1", page_size=1000)
    assert sorted(await every_page(stub.ListTaskRuns, by_task)) == [f"r{i:03}" for i in range(RUNS)]
    by_queue = history_pb2.ListRunsRequest(
        namespace="default", queue="q", page_size=1000,
        start_time=to_timestamp(T0 - 1), end_time=to_timestamp(T0 + RUNS),
    )  # fmt: skip
    assert sorted(await every_page(stub.ListRuns, by_queue)) == [f"r{i:03}" for i in range(RUNS)]
