"""Label selectors (``tikk.label_selectors``), and the embedded store's label index on a file
whose tasks were stored before the index existed."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from tests.factories import make_task
from tikk.errors import InvalidArgument
from tikk.label_selectors import LabelTerm, parse_selector
from tikk.store.sqlite.tasks import SqliteTaskStore


def test_a_selector_holds_when_every_term_does() -> None:
    selector = parse_selector("team=a, region!=eu")
    assert selector.terms == (LabelTerm("team", "a"), LabelTerm("region", "eu", equal=False))
    assert selector.indexed == LabelTerm("team", "a") and str(selector) == "team=a,region!=eu"
    assert selector.matches({"team": "a"})  # an absent key is not equal to eu
    assert selector.matches({"team": "a", "region": "us"})
    assert not selector.matches({"team": "a", "region": "eu"})
    assert not selector.matches({"team": "b"})
    assert parse_selector("region!=eu,team=a").indexed == LabelTerm("team", "a")
    assert parse_selector("k=a=b").terms == (LabelTerm("k", "a=b"),)
    assert parse_selector("k=").terms == (LabelTerm("k", ""),)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("region!=eu", "needs at least one key=value term"),
        ("team", "term 'team' is not key=value or key!=value"),
        ("team=a,,x=y", "term '' is not"),
        ("=a", "label key '' must be 1-63"),
        ("-x=a", "label key '-x' must be"),
        ("k" * 64 + "=a", "must be 1-63"),
    ],
)
def test_a_malformed_selector_is_refused_naming_its_fault(text: str, reason: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_selector(text)
    assert err.value.field == "label_selector" and reason in err.value.reason, err.value


async def test_tasks_stored_before_the_label_index_are_indexed_when_the_file_opens(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "tikk.db")
    store = SqliteTaskStore(path, shard_count=16)
    await store.start()
    for i in range(3):
        await store.create(dataclasses.replace(make_task(f"t{i}"), labels={"customer": "acme"}))
    await store.close()
    conn = sqlite3.connect(path)  # the file as a release before the index left it
    for trigger in ("insert", "delete", "seed"):
        conn.execute(f"DROP TRIGGER task_labels_{trigger}")
    conn.execute("DROP TABLE task_labels")
    conn.execute("DELETE FROM store_meta WHERE key = 'task_labels'")
    conn.commit()
    conn.close()
    reopened = SqliteTaskStore(path, shard_count=16)
    await reopened.start()
    try:
        page = await reopened.list_by_label("default", ("customer", "acme"), 10, "")
        assert [t.task_id for t in page.items] == ["t0", "t1", "t2"]
    finally:
        await reopened.close()
