"""``tests.deploy_tools``: a test needing a tool that ``make test`` builds beside the tests
waits for that build, and skips only if the tool is missing once no build is under way."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.deploy_tools import build_under_way, built


def test_a_tool_being_built_is_waited_for(tmp_path: Path) -> None:
    tool, marker = tmp_path / "helm", tmp_path / ".building"
    build = subprocess.Popen(["sh", "-c", f"sleep 1 && touch {tool}"])
    marker.write_text(f"{build.pid}\n")
    try:
        assert built(tool, marker) == tool
        assert build.poll() is not None  # it returned only once the build had ended
    finally:
        build.wait(10)
    assert not build_under_way(marker)


def test_a_tool_missing_with_no_build_under_way_skips(tmp_path: Path) -> None:
    marker = tmp_path / ".building"
    marker.write_text("not a pid")
    with pytest.raises(pytest.skip.Exception, match="builds promtool"):
        built(tmp_path / "promtool", marker)
    with pytest.raises(pytest.skip.Exception):
        built(tmp_path / "promtool", tmp_path / "no-marker")
