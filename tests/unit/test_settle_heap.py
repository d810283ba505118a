"""A long-lived process takes its start-up heap out of the collector's sight
(``server.runtime.settle_heap``), so a full collection scans only what its work keeps."""

from __future__ import annotations

import gc

from server.runtime import settle_heap


def test_a_settled_heap_leaves_full_collections_little_to_scan() -> None:
    assert gc.get_freeze_count() == 0
    try:
        settle_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # the modules the test process imported, at least
        # What a full collection would scan now: what was made since, not the frozen heap.
        assert len(gc.get_objects()) < frozen // 4
    finally:
        gc.unfreeze()
