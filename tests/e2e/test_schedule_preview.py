"""Previewing a schedule spec through a real server: the gRPC call and ``tikk schedule preview``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.conftest import Process
from tests.e2e.test_cli import tikk
from tikk.timestamps import to_timestamp
from tikk.v1 import schedules_pb2, schedules_pb2_grpc

pytestmark = pytest.mark.e2e
# 2026-03-28T12:00:00Z, the day before Europe/Oslo springs forward.
BEFORE_SPRING_MS = 1_774_699_200_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("preview")
    process = Process(["server", "--data-dir", str(data), "--listen", "127.0.0.1:0"], {})
    port = process.wait_for(re.compile(r"listening on [\d.]+:(\d+)")).group(1)
    yield f"127.0.0.1:{port}"
    assert process.stop() == 0, process.output()


def preview(address: str, spec: schedules_pb2.ScheduleSpec, count: int = 3) -> Any:
    req = schedules_pb2.PreviewScheduleRequest(
        spec=spec, count=count, after_time=to_timestamp(BEFORE_SPRING_MS)
    )
    with grpc.insecure_channel(address) as channel:
        return schedules_pb2_grpc.ScheduleServiceStub(channel).PreviewSchedule(req, timeout=10)


def test_a_skipped_wall_time_fires_once_at_the_end_of_the_gap(server: str) -> None:
    spec = schedules_pb2.ScheduleSpec(cron="30 2 * * *", timezone="Europe/Oslo")
    found = preview(server, spec).occurrences
    assert [(o.fire_time.ToJsonString(), o.local_time) for o in found] == [
        ("2026-03-29T01:00:00Z", "2026-03-29 03:00:00+02:00 CEST"),
        ("2026-03-30T00:30:00Z", "2026-03-30 02:30:00+02:00 CEST"),
        ("2026-03-31T00:30:00Z", "2026-03-31 02:30:00+02:00 CEST"),
    ]


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        (schedules_pb2.ScheduleSpec(cron="0 0 30 2 *"), "spec.cron", "never fires"),
        (schedules_pb2.ScheduleSpec(cron="61 * * * *"), "spec.cron", "61"),
        (schedules_pb2.ScheduleSpec(cron="* * * * *", timezone="Mars/Olympus"),
         "spec.timezone", "Mars/Olympus"),
        (schedules_pb2.ScheduleSpec(), "spec.cron", "exactly one"),
    ],
)  # fmt: skip
def test_bad_specs_are_invalid_argument_naming_the_field(
    server: str, spec: schedules_pb2.ScheduleSpec, field: str, reason: str
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        preview(server, spec)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    details = err.value.details() or ""
    assert details.startswith(field) and reason in details


def test_an_interval_below_the_minimum_is_refused(server: str) -> None:
    spec = schedules_pb2.ScheduleSpec()
    spec.interval.FromMilliseconds(500)
    with pytest.raises(grpc.RpcError) as err:
        preview(server, spec)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (err.value.details() or "").startswith("spec.interval:")


def test_the_cli_prints_local_and_utc_times(server: str, tmp_path: Path) -> None:
    done = tikk(
        server, "schedule", "preview", "--cron", "0 * * * *", "--tz", "Europe/Oslo",
        "--after", "2026-10-24T22:30:00Z", "--count", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # Fall back: 02:00 happens twice in Oslo and fires once, at its first occurrence.
    assert [line.split()[-1] for line in lines[1:]] == [
        "2026-10-24T23:00:00.000+00:00",
        "2026-10-25T00:00:00.000+00:00",
        "2026-10-25T02:00:00.000+00:00",
        "2026-10-25T03:00:00.000+00:00",
    ]
    assert "2026-10-25 02:00:00+02:00 CEST" in lines[2]
    bad = tikk(server, "schedule", "preview", "--cron", "0 0 31 2 *")
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr
