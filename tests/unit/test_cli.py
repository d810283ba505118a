"""CLI parsing, the worker import rule, and the commands that need the source checkout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from server.cli import main
from server.cli.devtools import import_devtools
from server.cli.options import EXIT_USAGE, parse_duration_ms, parse_time_ms
from server.cli.processes import load_worker

CHECKOUT = Path(__file__).resolve().parents[2]


def test_durations() -> None:
    assert parse_duration_ms("250ms") == 250
    assert parse_duration_ms("30s") == 30_000
    assert parse_duration_ms("1h30m") == 5_400_000
    assert parse_duration_ms("1.5s") == 1_500
    for bad in ("", "5", "5 s", "-1s", "1y"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration_ms(bad)


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


def _forget_devtools(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "devtools" or m.startswith("devtools.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", list(sys.path))  # whatever the import adds goes again


def test_devtools_commands_without_the_checkout_say_what_they_need(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As in an installed tikk: the devtools package cannot be imported.
    _forget_devtools(monkeypatch)
    monkeypatch.setitem(sys.modules, "devtools", None)
    for argv, example in [
        (["stack", "up"], "stack up"),
        (["bench", "--backends", "embedded"], "bench"),
        (["bench-schedules", "--schedules", "10"], "bench-schedules"),
    ]:
        assert main(argv) == EXIT_USAGE
        err = capsys.readouterr().err
        assert err.startswith(f"tikk {argv[0]}: this command needs the tikk source checkout")
        assert "devtools package is not part of the installed tikk" in err
        assert f"run it from the checkout, e.g. `.venv/bin/tikk {example}` there" in err


def test_devtools_are_found_in_the_checkout_the_server_package_comes_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As with `.venv/bin/tikk` of an editable install: the checkout itself is not on the path.
    _forget_devtools(monkeypatch)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != CHECKOUT])
    import_devtools("stack")
    assert Path(sys.modules["devtools.stack"].__file__ or "") == CHECKOUT / "devtools" / "stack.py"
