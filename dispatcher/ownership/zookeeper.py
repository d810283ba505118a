"""Shard ownership on ZooKeeper: the live dispatchers divide the shards, one active owner each.

Nodes under the chroot (default ``/tikk``)::

    <chroot>/members/<member id>    ephemeral; one per live dispatcher
    <chroot>/shards/<n>/owner       ephemeral; created by the member that owns shard n

Every member lists the members and computes the same assignment
(``dispatcher.ownership.assignment.assign``, a pure function). It creates the owner node of each
shard assigned to it that is free and watches the others; when such a node goes (its owner
released it in a rebalance, or its session expired after a crash) the watch wakes the member
and it takes the shard. A member deletes the owner nodes of shards no longer assigned to it,
after first dropping them from ``owned()``, so two members never report the same shard.

**Access.** A URL with a user (``zk://tikk@host:port/tikk?password_file=...``) authenticates
with the digest scheme, and every node tikk creates (the chroot included) carries an ACL that
grants everything to that identity and nothing to anyone else. ZooKeeper accepts any digest
login (the identity is a hash of user and password), so a wrong password shows as no access to
the chroot: ``start()`` reads it once and fails with ``BackendRefused``, as it does when the
server refuses the login (``enforce.auth.enabled``) or closes the session of a client that gave
none. Connecting (the URL, the login, the access check) is
``dispatcher.ownership.zk_connection``.

**Epochs.** The fencing epoch of a shard is the creation zxid (``czxid``) of its owner node.
ZooKeeper orders every write, so the node of a later owner has a larger czxid than any earlier
one: a stale owner presents an older epoch and the task store refuses its cursor writes.

**States** (``ZkOwnership.state``); ``owned()`` is non-empty only in ACTIVE::

               start()              member node and owner nodes verified
    STOPPED ────────────▶ SYNCING ─────────────────────────────────────▶ ACTIVE
                           ▲   ▲                                          │
                           │   │ CONNECTED, same session                  │ connection lost
                           │   └──────────────── SUSPENDED ◀──────────────┘ (or from SYNCING)
                           │ CONNECTED,             │
                           │ new session            │ session expired
                           └───────────── LOST ◀────┘

    ACTIVE ──members or owner nodes changed──▶ ACTIVE   (release first, then acquire)
    any ──stop()──▶ STOPPED

* SUSPENDED: the connection dropped, but no other member can take our shards before our
  session expires, so ``owned()`` keeps them under a lease that ends a margin before it can
  (``dispatcher.ownership.session_lease``; SYNCING on the same session keeps the lease until
  the pass publishes): a ZooKeeper leader's election, which closes every client's
  connection for about a second, costs the dispatcher nothing.
* LOST: the session expired, and with it every node of ours; kazoo reconnects with a new one.
* SYNCING: connected; the worker (re)registers the member node and checks each owner node's
  ``ephemeralOwner`` against our session before anything is reported owned again.

**Threads.** kazoo calls the connection listener on its connection thread and watches on its
callback thread. The listener only flips the state (emptying ``owned()``) and a watch only
wakes the worker thread of this class, which makes every ZooKeeper call, each with a timeout
(kazoo drops requests queued while disconnected when the session expires, so an unbounded
wait could hang for ever).
``owned()`` is an immutable mapping replaced as a whole, so the event loop reads it without a
lock. Every connection event bumps a generation; the worker publishes what it found only if
the generation did not move meanwhile. A heartbeat thread's reads time the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from dispatcher.ownership.assignment import assign
from dispatcher.ownership.session_lease import EMPTY, Lease, SessionLease
from dispatcher.ownership.zk_connection import (
    DEFAULT_CHROOT,
    check_zk_access,
    new_zk_client,
    parse_zk_url,
    stop_zk_client,
    zk_session_id,
)
from tikk.errors import BackendUnavailable, InvalidArgument
from tikk.urls import Credentials

try:
    from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.protocol.states import KazooState
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "ZooKeeper shard ownership needs kazoo: pip install 'tikk[zookeeper]'"
    ) from exc

log = logging.getLogger("tikk.ownership")

# Pause after a failed sync pass before the next one (the cause is logged).
_RETRY_DELAY_S = 0.5


@dataclass(frozen=True)
class _View:
    """What ``owned()`` reads, replaced as a whole: the verified shards (ACTIVE), and the
    lease on the shards held when the connection dropped (SUSPENDED, then SYNCING)."""

    owned: Mapping[int, int]
    lease: Lease | None


class ZkState(enum.Enum):
    """Where a member stands; see the module docstring for the transitions."""

    STOPPED = "stopped"
    SYNCING = "syncing"
    ACTIVE = "active"
    SUSPENDED = "suspended"
    LOST = "lost"


def default_member_id() -> str:
    """hostname-pid-random: unique per process, readable in ZooKeeper listings."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class ZkOwnership:
    """The ``Ownership`` backend on ZooKeeper (see the module docstring).

    ``session_timeout_s`` bounds how long the shards of a crashed dispatcher stay without an
    owner. ``clock`` (monotonic seconds) times the lease. Construction does no I/O;
    ``start()`` connects.
    """

    def __init__(
        self,
        hosts: str,
        shard_count: int,
        *,
        chroot: str = DEFAULT_CHROOT,
        member_id: str | None = None,
        session_timeout_s: float = 10.0,
        credentials: Credentials | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.member_id = member_id if member_id is not None else default_member_id()
        if not self.member_id or "/" in self.member_id:
            raise InvalidArgument("member_id", f"must be a non-empty znode name: {member_id!r}")
        if shard_count < 1 or session_timeout_s <= 0:
            raise InvalidArgument("ownership", "shard_count and session_timeout_s must be > 0")
        self._hosts = hosts
        self._credentials = credentials
        self._shard_count = shard_count
        self._chroot = chroot.rstrip("/")
        self._timeout_s = session_timeout_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._state = ZkState.STOPPED
        self._generation = 0
        self._view = _View(EMPTY, None)
        self._lease = SessionLease(session_timeout_s, clock)
        # Worker thread only: the session we joined with and shard → czxid of our owner nodes.
        self._session: int | None = None
        self._held: dict[int, int] = {}
        self._client: Any = None
        self._worker: threading.Thread | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        shard_count: int,
        *,
        member_id: str | None = None,
        session_timeout_s: float = 10.0,
    ) -> ZkOwnership:
        """From ``zk://host:port[,host:port][/chroot]``; raises ``InvalidArgument``."""
        target = parse_zk_url(url)
        return cls(
            target.hosts,
            shard_count,
            chroot=target.chroot,
            member_id=member_id,
            session_timeout_s=session_timeout_s,
            credentials=target.credentials,
        )

    def __repr__(self) -> str:
        return f"ZkOwnership({self._hosts}{self._chroot}, member={self.member_id!r})"

    @property
    def state(self) -> ZkState:
        return self._state

    def owned(self) -> Mapping[int, int]:
        view = self._view
        return view.owned if view.lease is None else self._lease.holds(view.lease)

    async def ping(self) -> None:
        state = self._state
        if state not in (ZkState.SYNCING, ZkState.ACTIVE):
            raise BackendUnavailable(f"ZooKeeper session at {self._hosts} is {state.value}")

    async def start(self) -> None:
        """Connect (raising ``BackendUnavailable`` if no server answers within the session
        timeout) and start the worker thread; a no-op when already started."""
        if self._client is not None:
            return
        self._client = new_zk_client(
            self._hosts, self._timeout_s, self._credentials, self._on_connection
        )
        self._stopping.clear()
        self._set_state(ZkState.SYNCING)
        try:
            await asyncio.to_thread(self._client.start, self._timeout_s)
        except KazooTimeoutError as exc:
            # kazoo has already stopped and closed the client.
            self._client = None
            self._set_state(ZkState.STOPPED)
            raise BackendUnavailable(
                f"ZooKeeper at {self._hosts} did not answer within {self._timeout_s}s"
            ) from exc
        try:
            await asyncio.to_thread(
                check_zk_access, self._client, self._chroot, self._hosts, self._credentials
            )
        except BaseException:
            client, self._client = self._client, None
            self._set_state(ZkState.STOPPED)
            await asyncio.to_thread(stop_zk_client, client)
            raise
        self._worker = threading.Thread(
            target=self._run, name=f"tikk-ownership-{self.member_id}", daemon=True
        )
        self._wake.set()
        self._worker.start()
        beat = threading.Thread(target=self._beat, args=(self._client,), daemon=True)
        beat.start()

    async def close(self) -> None:
        """Stop reporting shards, delete our owner and member nodes, close the session."""
        client, worker = self._client, self._worker
        if client is None:
            return
        self._client = self._worker = None
        self._set_state(ZkState.STOPPED)
        self._stopping.set()
        self._wake.set()
        await asyncio.to_thread(self._shutdown, client, worker)

    # -- kazoo's threads: flip state and wake the worker, nothing else ------------------------

    def _on_connection(self, state: str) -> None:
        """Connection listener; runs on kazoo's connection thread and must never block."""
        if state == KazooState.CONNECTED:
            self._set_state(ZkState.SYNCING, unless_stopped=True)
        elif state == KazooState.SUSPENDED:
            self._set_state(ZkState.SUSPENDED, unless_stopped=True)
        else:
            self._set_state(ZkState.LOST, unless_stopped=True)
        self._wake.set()

    def _on_watch(self, event: object) -> None:
        """Any watch (members, owner nodes) fired: resync on the worker thread."""
        self._wake.set()

    def _set_state(self, state: ZkState, *, unless_stopped: bool = False) -> None:
        # Every transition empties the verified shards: only a sync pass that finished within
        # one generation may fill them again. A dropped connection leases what was held; an
        # expired or closed session ends the lease. The lock is only ever held for these few
        # assignments.
        with self._lock:
            if unless_stopped and self._state is ZkState.STOPPED:
                return
            view = self._view
            lease = view.lease
            if state is ZkState.SUSPENDED:
                lease = self._lease.grant(view.owned or (lease.shards if lease else EMPTY))
            elif state in (ZkState.LOST, ZkState.STOPPED):
                lease = None
                self._lease.forget()
            self._state = state
            self._generation += 1
            self._view = _View(EMPTY, lease)

    # -- the heartbeat thread -------------------------------------------------------------------

    def _beat(self, client: Any) -> None:
        """A small read every ``heartbeat_s`` while connected, until this client is closed;
        each answer moves the time the lease counts from."""
        while not self._stopping.wait(self._lease.heartbeat_s) and self._client is client:
            if self._state not in (ZkState.SYNCING, ZkState.ACTIVE):
                continue
            sent = self._lease.now()
            try:
                client.exists_async(self._member_path).get(timeout=self._timeout_s)
            except (KazooException, KazooTimeoutError):
                continue  # no answer, no proof: the lease counts from an earlier one
            except Exception:  # the thread must live on, or every lease would shrink to none
                log.exception("%r: heartbeat failed", self)
                continue
            self._lease.answered(sent)

    # -- the worker thread ----------------------------------------------------------------------

    def _run(self) -> None:
        # The periodic pass is a safety net; watches normally wake the worker at once.
        while not self._stopping.is_set():
            self._wake.wait(self._timeout_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self._sync()
            except (KazooException, KazooTimeoutError) as exc:
                log.info("%r: sync interrupted (%r), retrying", self, exc)
                self._retry_soon()
            except Exception:  # the worker must survive anything, or owned() would freeze
                log.exception("%r: shard ownership sync failed, retrying", self)
                self._retry_soon()

    def _retry_soon(self) -> None:
        self._stopping.wait(_RETRY_DELAY_S)
        self._wake.set()

    def _sync(self) -> None:
        """One pass: join, compute the assignment, release what is no longer ours, acquire
        (or re-verify) the rest, then publish if no connection event intervened."""
        with self._lock:
            generation, state, client = self._generation, self._state, self._client
        session = zk_session_id(client)
        if state not in (ZkState.SYNCING, ZkState.ACTIVE) or session is None:
            return
        if session != self._session:
            # A new session: the nodes of the old one are gone, or soon will be.
            self._session, self._held = session, {}
        members = self._join(client, session)
        mine = assign(self._shard_count, members).get(self.member_id, [])
        self._release(client, [s for s in self._held if s not in mine])
        self._held = self._acquire(client, session, mine)
        self._publish(generation, self._held)

    def _join(self, client: Any, session: int) -> list[str]:
        """Ensure our member node exists for this session; the current member ids."""
        path = self._member_path
        stat = self._wait(client.exists_async(path, watch=self._on_watch))
        if stat is None:
            self._wait(client.create_async(path, self._node_value, ephemeral=True, makepath=True))
        elif stat.ephemeralOwner != session:
            # A previous process with our id, not yet expired; the watch fires when it goes.
            log.warning("%r: member node still held by session %x", self, stat.ephemeralOwner)
        members = self._wait(client.get_children_async(path.rpartition("/")[0], self._on_watch))
        return sorted(members)

    def _release(self, client: Any, shards: list[int]) -> None:
        """Hand over ``shards``: drop them from owned() first, then delete their nodes."""
        if not shards:
            return
        with self._lock:
            view = self._view
            kept = MappingProxyType({s: e for s, e in view.owned.items() if s not in shards})
            self._view = _View(kept, view.lease.without(shards) if view.lease else None)
        self._delete_own(client, [self._owner_path(s) for s in shards])
        self._held = {s: e for s, e in self._held.items() if s not in shards}

    def _acquire(self, client: Any, session: int, shards: Iterable[int]) -> dict[int, int]:
        """Shard → epoch of every shard in ``shards`` whose owner node is ours, creating the
        free ones; watches the others so their release wakes us."""
        pending = {s: client.exists_async(self._owner_path(s), self._on_watch) for s in shards}
        held: dict[int, int] = {}
        free: list[int] = []
        for shard, result in pending.items():
            stat = self._wait(result)
            if stat is None:
                free.append(shard)
            elif stat.ephemeralOwner == session:
                held[shard] = int(stat.czxid)
        creates = {
            s: client.create_async(
                self._owner_path(s),
                self._node_value,
                ephemeral=True,
                makepath=True,
                include_data=True,
            )
            for s in free
        }
        for shard, result in creates.items():
            try:
                _, stat = self._wait(result)
            except NodeExistsError:
                continue  # another member was faster; our exists watch fires when it lets go
            held[shard] = int(stat.czxid)
        return held

    def _publish(self, generation: int, held: Mapping[int, int]) -> None:
        with self._lock:
            if generation != self._generation:
                return  # a connection event came in meanwhile; the next pass decides
            self._state = ZkState.ACTIVE
            self._view = _View(MappingProxyType(dict(held)), None)

    def _delete_own(self, client: Any, paths: list[str]) -> None:
        """Delete those of ``paths`` that are ephemeral nodes of our current session."""
        stats = [(p, client.exists_async(p)) for p in paths]
        deletes = []
        for path, result in stats:
            stat = self._wait(result)
            if stat is None or stat.ephemeralOwner != self._session:
                continue
            # Checked before each delete: a delete sent on a newer session (ours expired)
            # could remove a successor's node at the same path.
            if zk_session_id(client) != self._session:
                return
            deletes.append(client.delete_async(path, version=stat.version))
        for result in deletes:
            with contextlib.suppress(NoNodeError):  # gone already: released all the same
                self._wait(result)

    def _shutdown(self, client: Any, worker: threading.Thread | None) -> None:
        # A worker blocked on a call is freed at the latest by its timeout.
        if worker is not None:
            worker.join(self._timeout_s * 2)
        try:
            if self._session is not None and zk_session_id(client) == self._session:
                owners = [self._owner_path(s) for s in self._held]
                self._delete_own(client, [*owners, self._member_path])
        except Exception:  # closing the session below removes our nodes all the same
            log.warning("%r: could not release shards before closing", self, exc_info=True)
        finally:
            self._held, self._session = {}, None
            stop_zk_client(client)

    def _wait(self, result: Any) -> Any:
        return result.get(timeout=self._timeout_s)

    @property
    def _member_path(self) -> str:
        return f"{self._chroot}/members/{self.member_id}"

    def _owner_path(self, shard: int) -> str:
        return f"{self._chroot}/shards/{shard}/owner"

    @property
    def _node_value(self) -> bytes:
        return self.member_id.encode()
