"""``devtools.stack_launch.start_node``: a node that does not answer in time is not left
running to hold its ports against the next start. A real process stands in for the JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import stack, stack_launch


def test_a_node_that_never_answers_is_killed_when_its_start_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKK_STACK_DIR", str(tmp_path))
    node = stack.Service("zookeeper", 2)

    def start(n: stack.Service, auth: bool) -> None:
        n.spawn(["sleep", "120"])

    monkeypatch.setitem(stack_launch._STARTERS, "zookeeper", (start, lambda n: False, 1))
    with pytest.raises(stack.StackError, match="zookeeper-2 not ready after 1s"):
        stack_launch.start_node(node)
    assert node.pid() is None
