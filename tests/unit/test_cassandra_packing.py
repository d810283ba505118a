"""How writes are packed into unlogged batches (``tikk.drivers.cassandra.packed``): a
partition's rows stay together and in order, a batch spans at most the partitions asked (never
more than Cassandra's warning threshold) and stays under the batch size limit."""

from __future__ import annotations

from tikk.drivers.cassandra_batches import BATCH_BYTES, MAX_BATCH_PARTITIONS, PartitionRow, packed


def row(partition: object, n: int, size: int = 100) -> PartitionRow:
    return PartitionRow(partition, "INSERT", [n], size)


def test_one_partition_per_batch_by_default_each_partition_whole_and_in_order() -> None:
    rows = [row("a", 1), row("b", 2), row("a", 3)]
    assert [[r.params[0] for r in g] for g in packed(rows, 1)] == [[1, 3], [2]]


def test_several_partitions_share_a_batch_up_to_the_number_asked() -> None:
    rows = [row(p, p) for p in range(7)]
    assert [len(g) for g in packed(rows, 3)] == [3, 3, 1]


def test_never_more_partitions_than_cassandra_warns_above() -> None:
    rows = [row(p, p) for p in range(3 * MAX_BATCH_PARTITIONS)]
    groups = packed(rows, 1000)
    assert max(len({r.partition for r in g}) for g in groups) == MAX_BATCH_PARTITIONS
    assert sum(len(g) for g in groups) == len(rows)  # nothing lost, nothing twice


def test_a_batch_stays_under_the_size_limit_even_within_one_partition() -> None:
    big = BATCH_BYTES // 3 + 1
    rows = [row("a", n, big) for n in range(5)]
    groups = packed(rows, 10)
    assert [len(g) for g in groups] == [2, 2, 1]
    assert all(sum(r.size for r in g) <= BATCH_BYTES for g in groups)
    assert [r.params[0] for g in groups for r in g] == [0, 1, 2, 3, 4]


def test_nothing_to_write_is_no_batch() -> None:
    assert packed([], 10) == []
