"""Connecting to ZooKeeper for shard ownership: the ``zk://`` URL, the kazoo client with its
digest login and ACL, the check that the login may use the chroot, and the session a client
holds. ``dispatcher.ownership.zookeeper`` explains what the nodes are for.

Needs the ``zookeeper`` extra (kazoo).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tikk.errors import BackendRefused, BackendUnavailable, InvalidArgument
from tikk.urls import BackendUrl, Credentials, split_url

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import (
        AuthFailedError,
        ConnectionClosedError,
        KazooException,
        NoAuthError,
        SessionClosedRequireSaslError,
        SessionExpiredError,
    )
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.retry import KazooRetry
    from kazoo.security import make_digest_acl
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "ZooKeeper shard ownership needs kazoo: pip install 'tikk[zookeeper]'"
    ) from exc

DEFAULT_CHROOT = "/tikk"
# How a server enforcing authentication ends a session that gave no login or a bad one.
_LOGIN_REFUSED = (
    AuthFailedError, SessionClosedRequireSaslError, SessionExpiredError, ConnectionClosedError,
)  # fmt: skip


@dataclass(frozen=True)
class ZkTarget:
    """Where the group lives: kazoo's ``host:port[,host:port]``, the chroot path, and the
    digest login (if any)."""

    hosts: str
    chroot: str
    credentials: Credentials | None = None


def parse_zk_url(url: str) -> ZkTarget:
    """``zk://[user@]host:port[,host:port][/chroot][?password_file=PATH]``; the chroot
    defaults to ``/tikk``. Raises ``InvalidArgument`` (field ``ownership_url``) for anything
    else (never showing a password)."""
    secured = BackendUrl.parse("ownership_url", url)
    if secured.tls is not None:
        raise InvalidArgument("ownership_url", "TLS to ZooKeeper is not supported")
    scheme, rest = split_url("ownership_url", secured.bare)
    hosts, _, path = rest.partition("/")
    path = path.partition("?")[0].strip("/")
    if scheme != "zk" or not _hosts_ok(hosts) or "//" in path:
        raise InvalidArgument(
            "ownership_url",
            f"expected zk://host:port[,host:port]/chroot, got {secured.redacted()!r}",
        )
    return ZkTarget(hosts, f"/{path}" if path else DEFAULT_CHROOT, secured.credentials)


def _hosts_ok(hosts: str) -> bool:
    """Every comma-separated entry is ``host`` or ``host:port``."""
    for entry in hosts.split(","):
        host, sep, port = entry.rpartition(":")
        if not entry or (sep and not (host and port.isdigit())):
            return False
    return True


def new_zk_client(
    hosts: str,
    timeout_s: float,
    credentials: Credentials | None,
    listener: Callable[[str], None],
) -> Any:
    """A kazoo client (not started) with the session timeout ``timeout_s``, the digest login
    of ``credentials`` (and an ACL that makes every node it creates theirs alone), and
    ``listener`` told of every connection state."""
    # kazoo's default reconnect backoff grows to an hour; retry often enough to reach a
    # server again before the session expires.
    retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=max(0.2, timeout_s / 4))
    login: dict[str, Any] = {}
    if credentials is not None:
        user, password = credentials.user, credentials.password
        login = {
            "auth_data": [("digest", f"{user}:{password}")],
            # Every node we create is ours alone (read, write, create, delete, admin).
            "default_acl": [make_digest_acl(user, password, all=True)],
        }
    client = KazooClient(hosts=hosts, timeout=timeout_s, connection_retry=retry, **login)
    client.add_listener(listener)
    return client


def check_zk_access(client: Any, chroot: str, hosts: str, credentials: Credentials | None) -> None:
    """Create the chroot (with our ACL) if missing and list it: proves the login before
    anything else runs. Raises ``BackendRefused`` naming the host and user."""
    user = credentials.user if credentials is not None else ""
    try:
        client.ensure_path(chroot)
        client.get_children(chroot)
    except NoAuthError:
        reason = f"no access to {chroot} (wrong user or password)"
        raise BackendRefused("zookeeper", hosts, user, reason) from None
    except _LOGIN_REFUSED as exc:
        # A server enforcing authentication closes a session that gave none or a bad one.
        reason = f"the login was refused ({type(exc).__name__})"
        if not user:
            reason += "; it requires one: add user@ and password_file= to the URL"
        raise BackendRefused("zookeeper", hosts, user, reason) from None
    except (KazooException, KazooTimeoutError) as exc:
        raise BackendUnavailable(f"ZooKeeper at {hosts}: {exc!r}") from exc


def stop_zk_client(client: Any) -> None:
    """End the client's session (its ephemeral nodes go with it) and release it."""
    client.stop()
    client.close()


def zk_session_id(client: Any) -> int | None:
    """The session of a connected client, else ``None``."""
    client_id = client.client_id if client is not None else None
    return int(client_id[0]) if client_id else None
