"""Server-wide settings from the config file and the environment (``server.cli.tunables``):
precedence, units, and a clear refusal of anything unknown or malformed."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import pytest

from server.cli.options import backend_options, http_address, settings
from server.cli.tunables import apply, reference
from tikk.errors import InvalidArgument
from tikk.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BASE = Settings(store_url="", history_url="", queue_url="")


def test_the_config_file_sets_limits_quotas_retries_and_the_dispatcher() -> None:
    document = {
        "limits": {"max_payload_bytes": 1_000, "max_extra_runs": 2},
        "deadlines": {"call_ms": "45s"},
        "quota_defaults": {"tasks_per_second": 50},
        "default_retry": {"max_attempts": 7, "multiplier": 1.5},
        "dispatcher": {"prefetch_ms": "3s", "scan_limit": 500},
        "server": {"late_write_grace_ms": "8s"},
    }
    s = apply(BASE, document, "tikk.toml", env={})
    assert (s.limits.max_payload_bytes, s.limits.max_extra_runs) == (1_000, 2)
    assert s.deadlines.call_ms == 45_000
    assert s.quotas.defaults.tasks_per_second == 50
    assert (s.limits.default_retry.max_attempts, s.limits.default_retry.multiplier) == (7, 1.5)
    assert (s.dispatch.prefetch_ms, s.dispatch.scan_limit) == (3_000, 500)
    assert s.late_write_grace_ms == 8_000
    assert s.limits.max_labels == BASE.limits.max_labels  # the rest keep their defaults


def test_the_environment_wins_over_the_file() -> None:
    env = {"TIKK_LIMITS_MAX_PAYLOAD_BYTES": "2000", "TIKK_DISPATCHER_POLL_INTERVAL_MS": "1m",
           "TIKK_QUOTA_DEFAULTS_TASKS_STORED": "none", "TIKK_SERVER": "not a setting"}  # fmt: skip
    s = apply(BASE, {"limits": {"max_payload_bytes": 1_000}}, "tikk.toml", env=env)
    assert s.limits.max_payload_bytes == 2_000
    assert s.dispatch.poll_interval_ms == 60_000
    assert s.quotas.defaults.tasks_stored is None


@pytest.mark.parametrize(
    ("document", "env", "named", "says"),
    [
        ({"limit": {}}, {}, "--config", "unknown table [limit]"),
        ({"limits": {"max_payload": 1}}, {}, "--config", "[limits] has no setting 'max_payload'"),
        ({"server": {"listen": "x"}}, {}, "--config", "[server] has no setting 'listen'"),
        ({"limits": {"max_labels": "many"}}, {}, "--config", "expected a whole number"),
        ({"deadlines": {"call_ms": "soon"}}, {}, "--config", "or a duration such as 90s"),
        ({"limits": {"max_labels": -1}}, {}, "--config", "must not be negative"),
        ({}, {"TIKK_LIMITS_MAX_PAYLOD_BYTES": "1"}, "TIKK_LIMITS_MAX_PAYLOD_BYTES",
         "no such setting"),
        ({}, {"TIKK_DISPATCHER_PREFETCH_MS": "2 seconds"}, "TIKK_DISPATCHER_PREFETCH_MS",
         "expected a whole number"),
        ({"quota_defaults": {"task_retention_seconds": 2**63 - 1}}, {}, "--config",
         "at most 316,224,000 (ten years)"),
        ({"deadlines": {"call_ms": "3661d"}}, {}, "--config", "(ten years)"),
        ({"dispatcher": {"lead_ms": "3s"}}, {}, "--config",
         "[dispatcher]: lead_ms (3000) must be at least 0 and below prefetch_ms (2000)"),
        ({}, {"TIKK_QUOTA_DEFAULTS_HISTORY_RETENTION_SECONDS": "316224001"},
         "TIKK_QUOTA_DEFAULTS_HISTORY_RETENTION_SECONDS", "ten years"),
    ],
)  # fmt: skip
def test_anything_unknown_or_malformed_is_refused_naming_it(
    document: dict[str, object], env: dict[str, str], named: str, says: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        apply(BASE, document, "'tikk.toml'", env=env)
    assert refused.value.field == named
    assert says in str(refused.value)


def test_a_process_reads_its_config_file_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "tikk.toml"
    config.write_text('[backends]\nqueue = "local:///tmp/q.db"\n[limits]\nmax_labels = 3\n')
    monkeypatch.setenv("TIKK_DEADLINES_STREAM_IDLE_MS", "10m")
    parser = argparse.ArgumentParser()
    backend_options(parser)
    s = settings(parser.parse_args(["--config", str(config), "--data-dir", str(tmp_path)]))
    assert s.queue_url == "local:///tmp/q.db"
    assert s.limits.max_labels == 3
    assert s.deadlines.stream_idle_ms == 600_000


def test_the_readme_lists_every_setting() -> None:
    assert reference() in (ROOT / "README.md").read_text()


def test_dev_s_http_listener_takes_the_port_after_listen_or_any_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # The port after a free one: kept when free, any port (0) when something holds it.
        busy = argparse.Namespace(http="auto", listen=f"127.0.0.1:{port - 1}")
        assert http_address(busy) == "127.0.0.1:0"
    free = argparse.Namespace(http="auto", listen=f"127.0.0.1:{port - 1}")
    assert http_address(free) == f"127.0.0.1:{port}"
    assert http_address(argparse.Namespace(http="auto", listen="127.0.0.1:0")) == "127.0.0.1:0"
    assert http_address(argparse.Namespace(http="off", listen="127.0.0.1:7070")) == ""
