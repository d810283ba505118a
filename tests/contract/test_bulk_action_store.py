"""The BulkActionStore contract (tikk.store.bulk_actions), run against every backend."""

from __future__ import annotations

import asyncio

import pytest

from tests.factories import T0
from tikk.bulk_actions import BulkAction, BulkProgress, BulkState, BulkVerb
from tikk.errors import InvalidArgument, NotFound
from tikk.label_selectors import parse_selector
from tikk.model import TaskState
from tikk.store.bulk_actions import BulkActionStore
from tikk.task_filters import TaskFilter


def action(action_id: str = "a1", namespace: str = "default") -> BulkAction:
    f = TaskFilter(
        namespace, queue="email", labels=parse_selector("customer=acme,region!=eu"),
        state=TaskState.DEAD_LETTERED, due_from_ms=T0, changed_until_ms=T0 + 5,
        error_type="TimeoutError",
    )  # fmt: skip
    return BulkAction(namespace, action_id, BulkVerb.REDRIVE, f, created_ms=T0, updated_ms=T0)


async def test_an_action_reads_back_whole_and_a_second_create_returns_the_first(
    bulk_store: BulkActionStore,
) -> None:
    first = action()
    assert await bulk_store.create(first) == (first, True)
    assert await bulk_store.get("default", "a1") == first
    other = BulkAction("default", "a1", BulkVerb.CANCEL, TaskFilter("default", "q"), T0, T0)
    assert await bulk_store.create(other) == (first, False)
    with pytest.raises(NotFound):
        await bulk_store.get("elsewhere", "a1")


async def test_progress_is_written_only_over_the_version_it_was_read_at(
    bulk_store: BulkActionStore,
) -> None:
    a, _ = await bulk_store.create(action())
    moved = a.next_version(cursor="tok", progress=BulkProgress(read=10, matched=4, acted=3,
                           skipped=1), owner="s1", lease_until_ms=T0 + 30_000)  # fmt: skip
    assert await bulk_store.replace(moved)
    assert not await bulk_store.replace(a.next_version(owner="s2"))  # read before the move
    assert await bulk_store.get("default", "a1") == moved
    stopped = moved.next_version(state=BulkState.STOPPED, finished_ms=T0 + 1)
    racing = [bulk_store.replace(stopped), bulk_store.replace(moved.next_version(owner="s3"))]
    assert sorted(await asyncio.gather(*racing)) == [False, True]  # one of them, never both
    assert not await bulk_store.replace(action("gone").next_version())


async def test_running_actions_of_every_namespace_are_found_and_ended_ones_are_not(
    bulk_store: BulkActionStore,
) -> None:
    for ns, action_id in [("default", "a1"), ("default", "a2"), ("other", "b1")]:
        await bulk_store.create(action(action_id, ns))
    a2 = await bulk_store.get("default", "a2")
    assert await bulk_store.replace(a2.next_version(state=BulkState.SUCCEEDED))
    running = await bulk_store.running(10)
    assert sorted((a.namespace, a.action_id) for a in running) == [
        ("default", "a1"), ("other", "b1"),
    ]  # fmt: skip
    assert len(await bulk_store.running(1)) == 1


async def test_a_namespaces_actions_are_listed_last_first_in_pages(
    bulk_store: BulkActionStore,
) -> None:
    for i in range(5):
        await bulk_store.create(action(f"a{i}"))
    await bulk_store.create(action("z", "other"))
    first = await bulk_store.list("default", 3, "")
    rest = await bulk_store.list("default", 3, first.next_token)
    assert [a.action_id for a in first.items + rest.items] == ["a4", "a3", "a2", "a1", "a0"]
    assert rest.next_token == ""
    with pytest.raises(InvalidArgument):
        await bulk_store.list("default", 3, "junk")
