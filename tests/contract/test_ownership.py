"""The Ownership contract (dispatcher.ownership), run against SingleOwner and ZooKeeper; then
ZooKeeper's own behaviour with real sessions: splitting, rebalancing, failover after kill -9,
SUSPENDED, and fencing of a stale owner in a real task store.

Every ZooKeeper test uses its own chroot. Link failures go through ``LinkProxy``, a TCP relay
on loopback in front of the real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from dispatcher.ownership import Ownership, SingleOwner
from dispatcher.ownership.assignment import assign
from dispatcher.ownership.zk_connection import parse_zk_url
from dispatcher.ownership.zookeeper import ZkOwnership, ZkState
from tests.link_proxy import LinkProxy
from tests.services import ZOOKEEPER, require, with_login, zk_login
from tests.waiting import eventually_async
from tikk.errors import BackendUnavailable, InvalidArgument, StaleOwner
from tikk.store.sqlite.tasks import SqliteTaskStore
from tikk.store.tasks import advance_cursor

SHARDS = 12
# Short sessions keep failover tests fast; the server's minimum is 1 s.
SESSION_S = 2.0
# How long a change may take to show when no session has to expire first.
SOON_S = 3.0
ROOT = Path(__file__).resolve().parents[2]


async def seconds_until(check: Callable[[], bool], within_s: float, what: str) -> float:
    """Seconds until ``check()`` held, polling like a dispatcher tick; fails after
    ``within_s``."""
    start = time.monotonic()
    await eventually_async(check, within_s, every_s=0.01, what=what)
    return time.monotonic() - start


def shards_of(owners: list[ZkOwnership]) -> dict[str, list[int]]:
    return {o.member_id: sorted(o.owned()) for o in owners}


# -- where the group lives ------------------------------------------------------------------


@dataclass
class ZkGroup:
    """A fresh chroot on the real server, and the members started in it (stopped at the end)."""

    address: str
    chroot: str
    members: list[ZkOwnership] = field(default_factory=list)

    def url(self, address: str | None = None) -> str:
        return with_login(f"zk://{address or self.address}{self.chroot}")

    def member(
        self, member_id: str | None = None, *, via: str | None = None, session_s: float = SESSION_S
    ) -> ZkOwnership:
        owner = ZkOwnership.from_url(
            self.url(via), SHARDS, member_id=member_id, session_timeout_s=session_s
        )
        self.members.append(owner)
        return owner

    async def join(
        self, member_id: str | None = None, *, via: str | None = None, session_s: float = SESSION_S
    ) -> ZkOwnership:
        owner = self.member(member_id, via=via, session_s=session_s)
        await owner.start()
        return owner


def _delete_tree(address: str, path: str) -> None:
    client = KazooClient(hosts=address, timeout=SESSION_S, **zk_login())
    client.start(SESSION_S)
    try:
        client.delete(path, recursive=True)
    finally:
        client.stop()
        client.close()


@pytest.fixture
async def zk() -> AsyncIterator[ZkGroup]:
    group = ZkGroup(require("zookeeper", ZOOKEEPER), f"/tikk-test/{uuid.uuid4().hex}")
    yield group
    for owner in group.members:
        await owner.close()
    await asyncio.to_thread(_delete_tree, group.address, group.chroot)


# -- the contract, for every backend ----------------------------------------------------------


@pytest.fixture(params=["single", "zookeeper"])
def make_owner(request: pytest.FixtureRequest) -> Iterator[Callable[[], Ownership]]:
    """Makes owners of one group of SHARDS shards; each made later than the one before."""
    if request.param == "single":
        # Production passes the start time in milliseconds; later processes get more.
        epochs = itertools.count(1_700_000_000_000, 1_000)
        yield lambda: SingleOwner(SHARDS, next(epochs))
    else:
        group: ZkGroup = request.getfixturevalue("zk")
        yield group.member


async def started_alone(make: Callable[[], Ownership]) -> Ownership:
    owner = make()
    await owner.start()
    await seconds_until(lambda: len(owner.owned()) == SHARDS, SOON_S, "a lone owner owns all")
    return owner


async def test_a_lone_owner_owns_every_shard(make_owner: Callable[[], Ownership]) -> None:
    owner = await started_alone(make_owner)
    assert set(owner.owned()) == set(range(SHARDS))


async def test_epochs_are_positive_integers(make_owner: Callable[[], Ownership]) -> None:
    owner = await started_alone(make_owner)
    assert all(isinstance(e, int) and e > 0 for e in owner.owned().values())


async def test_ping_answers_while_started_and_is_unavailable_once_closed(
    make_owner: Callable[[], Ownership],
) -> None:
    owner = await started_alone(make_owner)
    await owner.ping()
    await owner.close()
    with pytest.raises(BackendUnavailable):
        await owner.ping()


async def test_stop_empties_owned_and_is_idempotent(make_owner: Callable[[], Ownership]) -> None:
    owner = await started_alone(make_owner)
    await owner.close()
    assert owner.owned() == {}
    await owner.close()
    assert owner.owned() == {}


async def test_a_successor_fences_its_predecessor_in_the_store(
    make_owner: Callable[[], Ownership], tmp_path: Path
) -> None:
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    await store.start()
    first = await started_alone(make_owner)
    old = dict(first.owned())
    await advance_cursor(store, 3, 50, old[3])
    await first.close()
    second = await started_alone(make_owner)
    new = dict(second.owned())
    assert all(new[s] > old[s] for s in range(SHARDS))
    await advance_cursor(store, 3, 100, new[3])
    with pytest.raises(StaleOwner):
        await advance_cursor(store, 3, 200, old[3])
    assert (await store.get_cursor(3)).second == 100
    await store.close()


# -- ZooKeeper: the group -----------------------------------------------------------------------


async def test_two_members_split_the_shards_evenly(zk: ZkGroup) -> None:
    a, b = await zk.join("a"), await zk.join("b")
    expected = assign(SHARDS, ["a", "b"])
    await seconds_until(lambda: shards_of([a, b]) == expected, SOON_S, "an even split")
    assert len(a.owned()) == len(b.owned()) == SHARDS // 2
    assert set(a.owned()).isdisjoint(b.owned())
    assert set(a.owned()) | set(b.owned()) == set(range(SHARDS))


def overlaps(owners: list[ZkOwnership]) -> set[int]:
    """Shards two members reported at one instant: x held the same node (same epoch) before
    and after the read of y, and y reported the shard in between."""
    found: set[int] = set()
    for x, y in itertools.permutations(owners, 2):
        before, other, after = x.owned(), y.owned(), x.owned()
        found |= {s for s, e in before.items() if after.get(s) == e and s in other}
    return found


async def test_a_joining_member_rebalances_with_no_shard_owned_twice(zk: ZkGroup) -> None:
    a, b = await zk.join("a"), await zk.join("b")
    await seconds_until(
        lambda: shards_of([a, b]) == assign(SHARDS, ["a", "b"]), SOON_S, "two split"
    )
    c = await zk.join("c")
    seen: set[int] = set()

    def balanced() -> bool:
        seen.update(overlaps([a, b, c]))
        return shards_of([a, b, c]) == assign(SHARDS, ["a", "b", "c"])

    took = await seconds_until(balanced, SOON_S, "a three-way split")
    assert seen == set()
    assert took < SOON_S


async def test_a_stopped_member_hands_its_shards_over_without_waiting_for_expiry(
    zk: ZkGroup,
) -> None:
    a, b = await zk.join("a", session_s=10.0), await zk.join("b", session_s=10.0)
    await seconds_until(
        lambda: shards_of([a, b]) == assign(SHARDS, ["a", "b"]), SOON_S, "two split"
    )
    await b.close()
    took = await seconds_until(lambda: len(a.owned()) == SHARDS, SOON_S, "a takes over")
    assert took < 10.0 / 2  # far below the session timeout: b released, nothing expired


# -- ZooKeeper: a member killed with SIGKILL ---------------------------------------------------

# A dispatcher's ownership in a process of its own, so that the test can kill -9 it. It prints
# its owned mapping (JSON) whenever it changes.
CHILD = """
import asyncio, json, sys
from dispatcher.ownership.zookeeper import ZkOwnership

async def main() -> None:
    url, member, session_s, shards = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    own = ZkOwnership.from_url(url, int(shards), member_id=member, session_timeout_s=session_s)
    await own.start()
    last = None
    while True:
        if dict(own.owned()) != last:
            last = dict(own.owned())
            print(json.dumps(last), flush=True)
        await asyncio.sleep(0.01)  # how often the child looks at what it owns

asyncio.run(main())
"""


class ChildMember:
    """A member running in a child process; ``owned`` is what it printed last."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.owned: dict[int, int] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, url: str, member_id: str) -> ChildMember:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, url, member_id, str(SESSION_S), str(SHARDS),
            cwd=ROOT, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.owned = {int(s): e for s, e in json.loads(line).items()}

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()
        await self._reader


async def test_a_killed_member_loses_its_shards_once_its_session_expires(zk: ZkGroup) -> None:
    a = await zk.join("a")
    child = await ChildMember.start(zk.url(), "b")
    try:
        expected = assign(SHARDS, ["a", "b"])
        await seconds_until(
            lambda: shards_of([a]) == {"a": expected["a"]} and sorted(child.owned) == expected["b"],
            SOON_S + 2,  # the child's interpreter has to start first
            "a split with the child",
        )
        lost = dict(child.owned)
    finally:
        await child.kill()
    took = await seconds_until(lambda: len(a.owned()) == SHARDS, SESSION_S + SOON_S, "failover")
    print(f"failover after kill -9 with a {SESSION_S}s session: {took:.2f}s")
    # The owner nodes outlived the process until its session expired...
    assert took > SESSION_S / 2
    # ...and the successor's epochs are newer.
    assert all(a.owned()[s] > epoch for s, epoch in lost.items())


# -- ZooKeeper: link failures through a proxy -------------------------------------------------


@pytest.fixture
def proxy() -> Iterator[LinkProxy]:
    relay = LinkProxy(require("zookeeper", ZOOKEEPER))
    yield relay
    relay.close()


async def watch_owners(owners: list[ZkOwnership], until: asyncio.Event) -> list[str]:
    """Every 10 ms until ``until``, like dispatcher ticks: each instant at which two members
    reported the same shard."""
    overlaps = []
    while not until.is_set():
        seen: dict[int, str] = {}
        for owner in owners:
            for shard in owner.owned():
                if shard in seen:
                    overlaps.append(f"shard {shard}: {seen[shard]} and {owner.member_id}")
                seen[shard] = owner.member_id
        await asyncio.sleep(0.01)
    return overlaps


async def test_a_dropped_link_keeps_the_shards_under_the_lease_and_the_session_goes_on(
    zk: ZkGroup, proxy: LinkProxy
) -> None:
    """A link dropped for less than the lease (a ZooKeeper leader's election): the member
    is SUSPENDED and says so to its readiness probe, but its dispatcher never sees a shard
    go; the same session comes back with the same owner nodes."""
    a = await zk.join("a", via=proxy.address, session_s=4.0)
    await seconds_until(lambda: len(a.owned()) == SHARDS, SOON_S, "a owns all")
    await asyncio.sleep(1.0)  # heartbeats answered
    before = dict(a.owned())
    proxy.cut()
    await seconds_until(lambda: a.state is ZkState.SUSPENDED, 0.5, "SUSPENDED")
    with pytest.raises(BackendUnavailable, match="suspended"):
        await a.ping()  # what a dispatcher's /readyz asks
    seen = []
    for _ in range(50):  # 0.5 s of ticks
        seen.append(dict(a.owned()))
        await asyncio.sleep(0.01)
    proxy.restore()
    while a.state is not ZkState.ACTIVE:
        seen.append(dict(a.owned()))
        await asyncio.sleep(0.01)
    assert all(owned == before for owned in seen)
    await a.ping()
    assert dict(a.owned()) == before  # the same owner nodes: same epochs, nothing moved


async def cut_until_b_owns_all(
    proxy: LinkProxy, a: ZkOwnership, b: ZkOwnership, held: dict[int, int]
) -> float:
    """Cut ``a``'s link and wait until ``b`` owns every shard, watching that no tick sees
    two owners and that ``a`` keeps ``held`` at first; seconds from the cut until ``a``
    owned nothing."""
    done = asyncio.Event()
    watcher = asyncio.create_task(watch_owners([a, b], done))
    proxy.cut()
    cut_at = time.monotonic()
    await asyncio.sleep(0.2)
    assert dict(a.owned()) == held  # under the lease
    await seconds_until(lambda: a.owned() == {}, SESSION_S, "a's lease ends")
    dropped = time.monotonic() - cut_at
    await seconds_until(lambda: len(b.owned()) == SHARDS, SESSION_S + SOON_S, "failover")
    done.set()
    assert await watcher == []
    took = time.monotonic() - cut_at
    print(
        f"{SESSION_S}s session: a stopped {dropped:.2f}s after the cut, b took over at {took:.2f}s"
    )
    return dropped


async def test_a_lease_ends_before_the_session_can_expire_and_no_tick_sees_two_owners(
    zk: ZkGroup, proxy: LinkProxy, tmp_path: Path
) -> None:
    """A link cut for good: ``a`` keeps its shards under the lease, drops them before its
    session can expire, and only then does ``b`` take them, with newer epochs that fence a
    stale cursor write of ``a``; when the link heals, ``a`` rejoins with a new session."""
    store = SqliteTaskStore(str(tmp_path / "tikk.db"), SHARDS)
    await store.start()
    a, b = await zk.join("a", via=proxy.address), await zk.join("b")
    expected = assign(SHARDS, ["a", "b"])
    await seconds_until(lambda: shards_of([a, b]) == expected, SOON_S, "two split")
    await asyncio.sleep(0.5)  # heartbeats answered
    stale = dict(a.owned())
    shard = expected["a"][0]
    await advance_cursor(store, shard, 10, stale[shard])

    dropped = await cut_until_b_owns_all(proxy, a, b, stale)
    assert dropped < SESSION_S * (1 - 1 / 3)  # the lease's end: a margin before expiry
    successor = dict(b.owned())
    assert all(successor[s] > e for s, e in stale.items())
    await advance_cursor(store, shard, 20, successor[shard])
    # A stale owner waking up mid-tick still has its old epoch: refused.
    with pytest.raises(StaleOwner):
        await advance_cursor(store, shard, 30, stale[shard])

    proxy.restore()  # a's old session is gone (LOST): it rejoins with a new one
    await seconds_until(lambda: shards_of([a, b]) == expected, SESSION_S + SOON_S, "rejoined")
    assert all(a.owned()[s] > successor[s] for s in expected["a"])
    assert (await store.get_cursor(shard)).second == 20
    await store.close()


# -- construction and connection ----------------------------------------------------------------


def test_url_names_hosts_and_chroot() -> None:
    target = parse_zk_url("zk://h1:2181,h2:2181/tikk/prod")
    assert (target.hosts, target.chroot) == ("h1:2181,h2:2181", "/tikk/prod")
    assert parse_zk_url("zk://h1:2181").chroot == "/tikk"
    assert parse_zk_url("zk://h1:2181/").chroot == "/tikk"


@pytest.mark.parametrize(
    "url", ["kafka://h:1/x", "zk:///tikk", "zk://h:1/a//b", "h:1", "zk://h:x/t", "zk://h:1,/t"]
)
def test_bad_urls_are_invalid_arguments(url: str) -> None:
    with pytest.raises(InvalidArgument, match="ownership_url"):
        ZkOwnership.from_url(url, SHARDS)


def test_member_ids_must_be_node_names() -> None:
    with pytest.raises(InvalidArgument, match="member_id"):
        ZkOwnership.from_url("zk://h:1/x", SHARDS, member_id="a/b")
    assert "-" in ZkOwnership.from_url("zk://h:1/x", SHARDS).member_id


async def test_no_server_is_backend_unavailable() -> None:
    # A port nobody listens on: construction does no I/O, start() gives up after the timeout.
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    owner = ZkOwnership.from_url(f"zk://127.0.0.1:{port}/x", SHARDS, session_timeout_s=1.0)
    assert owner.owned() == {}
    with pytest.raises(BackendUnavailable, match="did not answer"):
        await owner.start()
    assert owner.owned() == {}
    await owner.close()
