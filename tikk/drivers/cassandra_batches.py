"""How the Cassandra session packs writes into unlogged batches
(``CassandraSession.partition_batches``): a partition's rows together, a few small partitions
per batch, under Cassandra's batch size limit. Pure code, no driver."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# Bytes of the rows of one unlogged batch: under the 50 KiB Cassandra refuses by default.
BATCH_BYTES = 40_000
# Cassandra warns of an unlogged batch spanning more partitions than this (its
# unlogged_batch_across_partitions_warn_threshold, 10 by default).
MAX_BATCH_PARTITIONS = 10


@dataclass(frozen=True)
class PartitionRow:
    """One write for ``partition_batches``: its partition key, statement and an estimate of
    its size in bytes."""

    partition: Hashable
    cql: str
    params: Sequence[Any]
    size: int


def packed(rows: Iterable[PartitionRow], partitions_per_batch: int) -> list[list[PartitionRow]]:
    """``rows`` in groups for ``partition_batches``: a partition's rows together and in order,
    at most ``partitions_per_batch`` partitions (capped at ``MAX_BATCH_PARTITIONS``) and
    about ``BATCH_BYTES`` per group; a partition larger than that spans groups."""
    groups: dict[Hashable, list[PartitionRow]] = {}
    for row in rows:
        groups.setdefault(row.partition, []).append(row)
    most = min(max(1, partitions_per_batch), MAX_BATCH_PARTITIONS)
    out: list[list[PartitionRow]] = [[]]
    partitions = size = 0
    for group in groups.values():
        if partitions >= most:
            out.append([])
            partitions = size = 0
        for row in group:
            if out[-1] and size + row.size > BATCH_BYTES:
                out.append([])
                partitions = size = 0
            out[-1].append(row)
            size += row.size
        partitions += 1
    return [group for group in out if group]
