"""The benchmark's profile summary (``devtools.profiles``): py-spy's collapsed stacks read into
where each process's CPU went, by library and by the innermost of our functions."""

from __future__ import annotations

from pathlib import Path

from devtools.profiles import RATE_HZ, area_of, innermost_own, render, summarise

RAW = """\
main (server/cli/serving.py:10);tick (dispatcher/scanner.py:5);execute (cassandra/cluster.py:9) 60
main (server/cli/serving.py:10);tick (dispatcher/scanner.py:5) 20
run (threading.py:982);_run_loop (cassandra/io/libevreactor.py:104) 20
not a sample line
"""


def test_a_sample_is_charged_to_its_library_and_to_the_innermost_of_our_functions(
    tmp_path: Path,
) -> None:
    (tmp_path / "dispatcher-1.txt").write_text(RAW)
    summary = summarise(tmp_path)["dispatcher-1"]
    assert summary["cpu_s"] == round(100 / RATE_HZ, 2)
    assert dict(summary["areas"]) == {"cassandra-driver": 80.0, "dispatcher.scanner": 20.0}
    assert dict(summary["functions"]) == {
        "dispatcher.scanner.tick": 80.0,
        "(libraries only)": 20.0,
    }
    table = render(summarise(tmp_path))
    assert table[2].startswith("| dispatcher-1 | 1 | cassandra-driver 80 %")


def test_areas_name_our_packages_by_their_second_level() -> None:
    assert area_of("f (tikk/store/cassandra/claims.py:3)") == "tikk.store.cassandra"
    assert area_of("f (worker_sdk/worker.py:3)") == "worker_sdk.worker"
    assert area_of("f (ssl.py:3)") == "ssl"
    assert area_of("f (somewhere/else.py:3)") == "python, other"
    assert innermost_own(["a (asyncio/events.py:1)"]) == "(libraries only)"
