"""The pure assignment of shards to members: balanced, deterministic, complete, stable."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.ownership.assignment import assign

member_ids = st.text(st.characters(codec="ascii", exclude_characters="/"), min_size=1, max_size=12)
groups = st.lists(member_ids, min_size=1, max_size=12, unique=True)
shard_counts = st.integers(min_value=0, max_value=300)


def owner_of(assignment: dict[str, list[int]]) -> dict[int, str]:
    return {shard: member for member, shards in assignment.items() for shard in shards}


def moved(before: dict[str, list[int]], after: dict[str, list[int]]) -> int:
    old, new = owner_of(before), owner_of(after)
    return sum(old[s] != new[s] for s in old)


@given(shard_counts, groups)
def test_every_shard_has_exactly_one_member(shard_count: int, members: list[str]) -> None:
    result = assign(shard_count, members)
    every = [s for shards in result.values() for s in shards]
    assert sorted(every) == list(range(shard_count))
    assert set(result) == set(members)


@given(shard_counts, groups)
def test_sizes_differ_by_at_most_one(shard_count: int, members: list[str]) -> None:
    sizes = [len(shards) for shards in assign(shard_count, members).values()]
    assert max(sizes) - min(sizes) <= 1


@given(shard_counts, groups.flatmap(lambda g: st.tuples(st.just(g), st.permutations(g))))
def test_order_and_duplicates_of_members_do_not_matter(
    shard_count: int, orders: tuple[list[str], list[str]]
) -> None:
    members, shuffled = orders
    assert assign(shard_count, members) == assign(shard_count, [*shuffled, *members[:1]])


@given(shard_counts, groups)
def test_shards_of_a_member_are_ascending(shard_count: int, members: list[str]) -> None:
    for shards in assign(shard_count, members).values():
        assert shards == sorted(shards)


@given(st.integers(min_value=1, max_value=300), groups, member_ids)
def test_a_joining_member_moves_few_shards(
    shard_count: int, members: list[str], newcomer: str
) -> None:
    if newcomer in members:
        return
    before = assign(shard_count, members)
    after = assign(shard_count, [*members, newcomer])
    # The newcomer's fair share must move; the rest stays put but for quota effects.
    fair = math.ceil(shard_count / (len(members) + 1))
    assert moved(before, after) <= 2 * fair + len(members)


@given(st.integers(min_value=1, max_value=300), groups.filter(lambda g: len(g) > 1))
def test_a_leaving_member_keeps_most_others_in_place(shard_count: int, members: list[str]) -> None:
    before = assign(shard_count, members)
    after = assign(shard_count, members[1:])
    fair = math.ceil(shard_count / len(members))
    assert moved(before, after) <= 2 * fair + len(members)


def test_no_members_means_no_owners() -> None:
    assert assign(16, []) == {}


def test_no_shards_gives_every_member_none() -> None:
    assert assign(0, ["a", "b"]) == {"a": [], "b": []}


def test_one_member_owns_everything() -> None:
    assert assign(5, ["only"]) == {"only": [0, 1, 2, 3, 4]}


def test_the_answer_is_fixed_across_processes() -> None:
    # BLAKE2b, not hash(): every dispatcher, on any machine and Python, computes this split.
    assert assign(8, ["c", "a", "b"]) == {"a": [0, 5, 7], "b": [2, 3, 6], "c": [1, 4]}


def test_adding_a_tenth_member_moves_about_its_share() -> None:
    members = [f"dispatcher-{i}" for i in range(9)]
    change = moved(assign(256, members), assign(256, [*members, "dispatcher-9"]))
    # Contiguous ranges would move about half (128); the fair share is 26.
    assert change <= 40


def test_negative_shard_count_is_refused() -> None:
    with pytest.raises(ValueError, match="shard_count"):
        assign(-1, ["a"])
