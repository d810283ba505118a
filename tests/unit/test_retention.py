"""Retention on the embedded store (``server.ops.retention``): a pass deletes the finished
tasks and the runs older than each namespace's retention, never an open task, nothing of a
namespace that keeps everything, and at most its share per pass."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from server.app import Operations
from server.ops.quotas import QuotaGate
from server.ops.retention import RetentionPrune, RetentionSettings
from server.wiring import Backends, open_backends
from tests.embedded_api import embedded_settings
from tests.factories import T0, make_run, make_task
from tikk.clock import ManualClock
from tikk.delivery_tokens import new_keys
from tikk.model import Succeed
from tikk.quotas import NamespaceQuotas
from tikk.settings import QuotaSettings
from tikk.telemetry import Telemetry

DAY_MS = 86_400_000


@dataclasses.dataclass
class Rig:
    backends: Backends
    ops: Operations
    clock: ManualClock


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    defaults = NamespaceQuotas(history_retention_seconds=7 * 86_400)
    settings = embedded_settings(tmp_path, quotas=QuotaSettings(defaults=defaults))
    clock = ManualClock(T0)
    backends = await open_backends(settings)
    ops = Operations.over(backends, settings, clock, rng=random.Random(1),
                          telemetry=Telemetry(), keys=new_keys())  # fmt: skip
    yield Rig(backends, ops, clock)
    await backends.close()


async def finished(rig: Rig, namespace: str, task_id: str, at_ms: int) -> None:
    t = make_task(task_id, namespace=namespace, due_ms=at_ms - 1, created_ms=at_ms - 10)
    await rig.backends.store.create(t)
    await rig.backends.store.mark_dispatched([t.entry()], at_ms - 1)
    await rig.backends.store.finish_attempt(namespace, task_id, 1, Succeed(), at_ms)


async def ids(rig: Rig, namespace: str) -> set[str]:
    page = await rig.backends.store.list_tasks(namespace, "q", None, 1_000, "")
    return {t.task_id for t in page.items}


async def test_a_pass_deletes_what_each_namespace_no_longer_keeps(rig: Rig) -> None:
    await rig.ops.admin.set_quotas("short", NamespaceQuotas(task_retention_seconds=86_400))
    for ns in ("short", "keep"):
        await finished(rig, ns, "old", T0 - 3 * DAY_MS)
        await finished(rig, ns, "new", T0 - DAY_MS // 2)
        await rig.backends.store.create(make_task("open", namespace=ns, due_ms=T0 + DAY_MS))
    for ns in ("short", "keep"):
        await rig.backends.history.append_many([
            make_run("ancient", namespace=ns, finished_ms=T0 - 30 * DAY_MS),
            make_run("recent", namespace=ns, finished_ms=T0 - DAY_MS),
        ])  # fmt: skip
    done = await rig.ops.retention.pass_once()
    assert (done.tasks, done.runs) == (1, 2)  # history's week is the server default
    assert await ids(rig, "short") == {"new", "open"}
    assert await ids(rig, "keep") == {"old", "new", "open"}  # no task retention: kept
    for ns in ("short", "keep"):
        runs = await rig.backends.history.list_for_task(ns, "t1", 10, "")
        assert [r.run_id for r in runs.items] == ["recent"]
    rig.clock.advance(DAY_MS)
    assert (await rig.ops.retention.pass_once()).tasks == 1
    assert await ids(rig, "short") == {"open"}


async def test_a_pass_deletes_at_most_its_share_and_the_next_goes_on(rig: Rig) -> None:
    await rig.ops.admin.set_quotas("big", NamespaceQuotas(task_retention_seconds=60))
    for i in range(25):
        await finished(rig, "big", f"t{i:02}", T0 - DAY_MS)
    small = RetentionSettings(batch=4, most_per_pass=10)
    b = rig.backends
    gate = QuotaGate(b.quotas, b.schedules, rig.clock, QuotaSettings())
    prune = RetentionPrune(b.store, b.history, b.quotas, gate, clock=rig.clock, settings=small)
    assert [(await prune.pass_once()).tasks for _ in range(4)] == [10, 10, 5, 0]
    assert await ids(rig, "big") == set()


async def test_a_retention_stored_past_the_maximum_is_kept_as_the_maximum(rig: Rig) -> None:
    # Written before the bound existed (the API refuses it now): read as ten years, and the
    # namespaces after it are pruned as ever.
    await rig.backends.quotas.put("absurd", NamespaceQuotas(task_retention_seconds=2**63 - 1), T0)
    await rig.ops.admin.set_quotas("short", NamespaceQuotas(task_retention_seconds=86_400))
    for ns in ("absurd", "short"):
        await finished(rig, ns, "old", T0 - 3 * DAY_MS)
    done = await rig.ops.retention.pass_once()
    assert (done.tasks, done.failed) == (1, 0)
    assert await ids(rig, "absurd") == {"old"}
    assert await ids(rig, "short") == set()


async def test_a_namespace_whose_prune_fails_is_logged_and_the_others_are_pruned(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = rig.backends.store
    prune = store.prune_finished

    async def failing(namespace: str, before_ms: int, most: int) -> int:
        if namespace == "broken":
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        return await prune(namespace, before_ms, most)

    monkeypatch.setattr(store, "prune_finished", failing)
    for ns in ("broken", "short"):
        await rig.ops.admin.set_quotas(ns, NamespaceQuotas(task_retention_seconds=86_400))
        await finished(rig, ns, "old", T0 - 3 * DAY_MS)
    done = await rig.ops.retention.pass_once()
    assert (done.tasks, done.failed) == (1, 1)
    assert await ids(rig, "short") == set()
    assert await ids(rig, "broken") == {"old"}
    assert "retention of namespace 'broken' failed" in caplog.text
