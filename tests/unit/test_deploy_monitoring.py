"""The alert rules and the Grafana dashboard under ``deploy/``, read as Prometheus and Grafana
would: well-formed, every rule complete, and every metric they name one that tikk exports, of
the right kind (a renamed metric fails here, not silently in someone's Grafana)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_tools import BIN, built
from tikk.metric_catalog import ALL

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "tikk-alerts.yml"
PROMTOOL = BIN / "promtool"
DASHBOARD = ROOT / "deploy" / "grafana" / "tikk-overview.json"

_NAME = re.compile(r"\btikk_[a-z0-9_]+")
_DURATION = re.compile(r"^\d+[smhd]$")
_RANGE = re.compile(r"\[([^\]]*)\]")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
# What the expressions may call: a misspelt function is a rule Prometheus refuses to load.
_FUNCTIONS = {"histogram_quantile", "rate", "increase", "absent", "sum", "max", "min", "avg",
              "by", "label_values"}  # fmt: skip


def exported_series() -> set[str]:
    """Every series name a scrape of tikk can hold."""
    return {m.prometheus_name + suffix for m in ALL for suffix in _SUFFIXES[m.kind]}


def check_expression(expr: str) -> list[str]:
    """What is wrong with ``expr``: unknown metrics, unbalanced brackets, bad ranges,
    unknown functions."""
    problems = [f"unknown metric {n}" for n in _NAME.findall(expr) if n not in exported_series()]
    for opening, closing in ("()", "{}", "[]"):
        if expr.count(opening) != expr.count(closing):
            problems.append(f"unbalanced {opening}{closing}")
    problems += [f"bad range [{r}]" for r in _RANGE.findall(expr) if not _DURATION.match(r)]
    called = set(re.findall(r"\b([a-z_]+)\s*\(", expr)) - {"tikk"}
    problems += [f"unknown function {f}" for f in sorted(called - _FUNCTIONS)]
    return problems


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_the_rule_file_has_named_groups_of_complete_alerts() -> None:
    loaded = yaml.safe_load(RULES.read_text())
    assert [g["name"] for g in loaded["groups"]]
    names = [r["alert"] for r in rules()]
    assert len(names) == len(set(names)) >= 8
    for rule in rules():
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert _DURATION.match(rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"page", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_each_rule_names_only_metrics_tikk_exports(rule: dict[str, Any]) -> None:
    assert check_expression(rule["expr"]) == []


def test_the_issue_s_alerts_are_all_there() -> None:
    """Lateness p99, dead letters growing, a shard without an owner, consumer lag, results
    refused: each watched by some rule."""
    exprs = " ".join(r["expr"] for r in rules())
    for watched in ("tikk_dispatch_lateness_ms_bucket", "tikk_run_start_lateness_ms_bucket",
                    "tikk_dead_letters_total", "tikk_dispatch_shards_owned",
                    "tikk_queue_oldest_age_ms", "tikk_results_refused_total"):  # fmt: skip
        assert watched in exprs


def test_the_checker_catches_what_prometheus_would_refuse() -> None:
    assert check_expression("rate(tikk_dispatched_total[5m])") == [
        "unknown metric tikk_dispatched_total"
    ]
    assert check_expression("sum(rate(tikk_retries_total[5x])") == [
        "unbalanced ()",
        "bad range [5x]",
    ]
    assert check_expression("sum(tikk_queue_waiting_total)") == [
        "unknown metric tikk_queue_waiting_total"  # a gauge has no _total
    ]
    assert check_expression("histogram_quantil(0.9, x)") == ["unknown function histogram_quantil"]


@pytest.mark.parametrize("check", [["check", "rules", "tikk-alerts.yml"],
                                   ["test", "rules", "tikk-alerts.test.yml"]])  # fmt: skip
def test_promtool_accepts_the_rules_and_each_alert_fires_as_written(check: list[str]) -> None:
    promtool = str(built(PROMTOOL))
    done = subprocess.run(
        [promtool, *check], cwd=RULES.parent, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_dashboard_is_grafana_json_over_tikk_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels) >= 10
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            expr = target["expr"].replace("$queue", ".*")
            assert check_expression(expr) == [], (panel["title"], expr)
    queue = next(v for v in dashboard["templating"]["list"] if v["name"] == "queue")
    assert check_expression(queue["definition"]) == []
