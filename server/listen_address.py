"""Who listens on the API's address: one server process alone, or the members of one group
(``server.supervisor``), never a stranger beside them.

gRPC sets ``SO_REUSEPORT`` on Linux unless told otherwise, and with it a second server on an
address already served binds without error and takes a share of the new connections: a server
started without ``--auth`` would answer some of the callers of one started with it, into
another store. So a server alone binds without the option and fails while anyone listens on
its address; the members of a group ask for it, and their supervisor first checks the address
with a bind that does not (``refuse_if_taken``).
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from tikk.errors import FailedPrecondition


def address_taken(listen: str, detail: str = "") -> FailedPrecondition:
    """The refusal of ``listen``: in use when another socket listens there, else ``detail``
    (what the bind said)."""
    if detail and not address_in_use(listen):
        return FailedPrecondition(f"cannot listen on {listen}: {detail}")
    return FailedPrecondition(
        f"cannot listen on {listen}: address in use by another process (only the processes "
        "of one --processes group share a port)"
    )


def refuse_if_taken(listen: str) -> None:
    """Raise ``address_taken`` when another process listens on ``listen`` (host:port)."""
    if address_in_use(listen):
        raise address_taken(listen)


def address_in_use(listen: str) -> bool:
    """Whether a bind of ``listen`` without ``SO_REUSEPORT`` fails because the address is in
    use. Port 0 (any free port) never is; a host that does not resolve is left to the bind."""
    host, _, port = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") else host
    if not port.isdigit() or int(port) == 0:
        return False
    try:
        found = socket.getaddrinfo(
            host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror:
        return False
    return any(_bind_in_use(family, address) for family, _, _, _, address in found)


def _bind_in_use(family: socket.AddressFamily, address: Any) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As gRPC binds: a port left in TIME_WAIT by past connections is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False
