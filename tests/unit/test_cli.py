"""CLI parsing, the worker import rule, and the developer tools beside the CLI
(``python -m devtools``)."""

from __future__ import annotations

import argparse
import ast
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.__main__ import build_parser as build_devtools_parser
from devtools.bench_report import command_line
from server.cli import main
from server.cli.imports import Progress
from server.cli.options import EXIT_USAGE, parse_duration_ms, parse_time_ms
from server.cli.workers import load_worker

CHECKOUT = Path(__file__).resolve().parents[2]


def test_durations() -> None:
    assert parse_duration_ms("250ms") == 250
    assert parse_duration_ms("30s") == 30_000
    assert parse_duration_ms("1h30m") == 5_400_000
    assert parse_duration_ms("1.5s") == 1_500
    for bad in ("", "5", "5 s", "-1s", "1y"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration_ms(bad)
    assert parse_duration_ms("3660d") == 3660 * 86_400_000  # ten years of 366 days
    for too_long in ("3661d", "9" * 400 + "d"):
        with pytest.raises(argparse.ArgumentTypeError, match="longer than ten years"):
            parse_duration_ms(too_long)


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--task-retention-seconds", "316224001", "at most 316,224,000 s (ten years)"),
        ("--history-retention-seconds", str(2**63 - 1), "ten years"),
        ("--tasks-stored", "9" * 25, "a quota is at most"),
    ],
)
def test_a_quota_out_of_range_is_a_usage_error_naming_it(
    option: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["quota", "set", "--namespace", "x", option, value])
    assert exit_.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert option in err and said in err


def test_times_default_to_utc() -> None:
    assert parse_time_ms("2030-01-01T00:00:00") == 1_893_456_000_000
    assert parse_time_ms("2030-01-01T01:00:00+01:00") == 1_893_456_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time_ms("tomorrow")


@pytest.mark.parametrize("size", ["0", "-3", "many"])
def test_an_import_batch_size_no_import_can_use_is_a_usage_error(
    size: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["task", "import", "-", "--batch-size", size])
    assert exit_.value.code == EXIT_USAGE
    assert "--batch-size" in capsys.readouterr().err


def test_worker_targets() -> None:
    assert load_worker("examples.demo_worker:worker").queues == ["demo"]
    for bad, message in [
        ("examples.demo_worker", "MODULE:ATTRIBUTE"),
        ("server.cli:main", "collides"),
        ("examples.demo_worker:greet", "not a worker_sdk.Worker"),
    ]:
        with pytest.raises(ImportError, match=message):
            load_worker(bad)


def test_no_module_of_the_server_imports_the_devtools() -> None:
    # The installed tikk has no devtools package: the developer tools sit on top of it.
    importing = []
    for path in sorted((CHECKOUT / "server").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(n == "devtools" or n.startswith("devtools.") for n in names):
                importing.append(f"{path.relative_to(CHECKOUT)}:{node.lineno}")
    assert importing == []


def test_the_developer_tools_are_not_tikk_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("stack", "bench", "bench-readme", "bench-schedules"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == EXIT_USAGE
        assert f"invalid choice: '{command}'" in capsys.readouterr().err


def test_the_developer_tools_keep_their_options() -> None:
    parser = build_devtools_parser()
    bench = parser.parse_args(["bench", "--smoke", "--server-arg=--processes", "--tls"])
    assert (bench.smoke, bench.server_arg, bench.tls, bench.backends) == (
        True, ["--processes"], True, "embedded,stack",
    )  # fmt: skip
    stack = parser.parse_args(["stack", "up", "kafka", "--plain", "--fresh"])
    assert (stack.action, stack.services, stack.plain, stack.fresh) == ("up", ["kafka"], True, True)
    timed = parser.parse_args(["bench-schedules", "--store", "cassandra://h/k", "--lead", "5"])
    assert (timed.store, timed.lead, timed.schedules) == ("cassandra://h/k", 5.0, 10_000)
    readme = parser.parse_args(["bench-readme", "a.json", "b.json", "--plots", "docs/bench"])
    assert (readme.results, readme.plots, readme.readme) == (["a.json", "b.json"], "docs/bench",
                                                             "README.md")  # fmt: skip
    with pytest.raises(SystemExit):
        parser.parse_args(["stack", "sideways"])


def test_the_bench_report_names_the_command_as_run_without_its_output_folder() -> None:
    argv = ["bench", "--backends", "embedded", "--out", "x", "--out=y", "--tasks", "10"]
    assert command_line(argv) == "python -m devtools bench --backends embedded --tasks 10"


def _devtools(*args: str, stack_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIKK_STACK_DIR": str(stack_dir), "TIKK_STACK_PORT_OFFSET": "500"}
    return subprocess.run(
        [sys.executable, "-m", "devtools", *args], cwd=CHECKOUT, env=env, capture_output=True,
        text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_the_developer_tools_run_as_python_m_devtools(tmp_path: Path) -> None:
    # A stack folder of its own, where nothing runs: status says so, down stops nothing.
    status = _devtools("stack", "status", stack_dir=tmp_path)
    assert status.returncode == 1, status.stderr
    assert [line.split()[:2] for line in status.stdout.splitlines()[1:]] == [
        ["zookeeper", "down"], ["kafka", "down"], ["cassandra", "down"],
    ]  # fmt: skip
    replicated = _devtools("stack", "status", "--nodes", "3", stack_dir=tmp_path)
    assert replicated.returncode == 1, replicated.stderr
    rows = [line.split()[:3] for line in replicated.stdout.splitlines()[1:]]
    assert rows[0] == ["zookeeper-1", "down", "127.0.0.31"] and len(rows) == 9
    down = _devtools("stack", "down", stack_dir=tmp_path)
    assert down.returncode == 0 and "stopped" not in down.stdout, down.stderr
    usage = _devtools("bench-schedules", "--shards", "many", stack_dir=tmp_path)
    assert usage.returncode == 2 and "python -m devtools bench-schedules" in usage.stderr
    passed_on = _devtools("faults", "--mode", "soak", stack_dir=tmp_path)
    assert passed_on.returncode == 2 and "--mode soak needs --duration" in passed_on.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_import_progress_rewrites_a_terminal_line_but_writes_whole_lines_to_a_log() -> None:
    log, terminal = io.StringIO(), _Terminal()
    for out in (log, terminal):
        progress = Progress(total_bytes=1_000, read_bytes=500, accepted=40, rejected=2)
        progress.show(out)
        progress.show(out)  # too soon after the first: not written again
        progress.show(out, final=True)
    assert "\r" not in log.getvalue()
    assert log.getvalue().splitlines()[0].startswith("imported 42 (2 rejected) at ")
    assert len(log.getvalue().splitlines()) == 2 and log.getvalue().endswith("\n")
    assert terminal.getvalue().count("\r") == 2 and terminal.getvalue().endswith("   \n")
