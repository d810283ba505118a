"""``--log-format json``: one JSON object per line, with the ids a line is about."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

from server.log_format import JsonLines

ROOT = Path(__file__).resolve().parents[2]


def record(message: str, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("tikk.server", logging.WARNING, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(r, key, value)
    return r


def test_a_line_is_one_json_object_with_the_ids_it_is_about() -> None:
    line = JsonLines().format(record("slow write", namespace="shop", task_id="t1", queue="q"))
    parsed = json.loads(line)
    assert parsed["message"] == "slow write" and parsed["level"] == "WARNING"
    assert (parsed["namespace"], parsed["task_id"], parsed["queue"]) == ("shop", "t1", "q")
    assert parsed["logger"] == "tikk.server" and parsed["time"].endswith("+00:00")
    assert "\n" not in line


def test_a_multi_line_message_stays_one_line() -> None:
    parsed = json.loads(JsonLines().format(record("first\nsecond")))
    assert parsed["message"] == "first\nsecond"


def test_a_process_logs_json_lines_when_asked(tmp_path: Path) -> None:
    """A process whose logging is set up as the ``tikk`` command sets it up."""
    code = (
        "import logging, sys\n"
        "from server.log_format import configure_logging\n"
        "configure_logging('json')\n"
        "logging.getLogger('tikk.dispatcher').warning('queue %r refused', 'q', "
        "extra={'queue': 'q'})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    [line] = done.stderr.splitlines()
    assert json.loads(line)["queue"] == "q"
    assert json.loads(line)["message"] == "queue 'q' refused"
