"""Which servers a client dials: one address, a list of addresses, or a DNS name.

::

    127.0.0.1:7070                    one server, dialled exactly as gRPC dials any target
    10.0.0.1:7070,10.0.0.2:7070       several servers: gRPC's ``ipv4:`` target, round_robin
    [fd00::1]:7070,[fd00::2]:7070     the same over IPv6 (``ipv6:``)
    dns:///tikk.internal:7070         every address the name resolves to, round_robin

With several servers (a list, or a ``dns:`` name) the channel uses gRPC's ``round_robin``
policy: it keeps a connection to each server and sends each call to the next one whose
connection is ready, so calls spread over the servers and one that is down (its connection
refused or lost) is skipped until it answers again. A call that was on a server when it died
ends UNAVAILABLE; the client sends it again, to another server, only if that is safe
(``tikk.client.retries``). One address, and any other gRPC target (``unix:``, ``ipv4:``, a
host name), is passed to gRPC unchanged, so it works as it always did (``pick_first``).

A list holds IP addresses of one family, because that is what gRPC's static targets can
express; a host name in a list would need a resolver of tikk's own, so a list with one is
refused, as is a list mixing IPv4 and IPv6: give a DNS name that resolves to every server
instead. Entries are ``host:port`` (``[v6]:port``), separated by commas, spaces around them
ignored; an empty entry, a missing or bad port (1 to 65535), a repeated entry, a ``dns:`` or
other scheme inside a list is refused with ``TransportError`` naming the entry.

A list of servers shares one ``:authority``, which TLS also checks the servers' certificates
against: the first entry's, so a list of one host on several ports (or servers whose
certificates all carry the first entry's address) needs nothing more; a list of several hosts
over TLS needs the name their certificates share (``Transport(server_name=...)``,
``--tls-server-name``). Standard library only.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# round_robin, as a service config: gRPC's documented way to choose a channel's policy.
ROUND_ROBIN_CONFIG = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
# With several servers a client pings each connection that carries a call, so that a server
# that hangs, or whose host vanished without resetting the connection, is noticed: the
# connection closes once a ping goes unanswered for the timeout, its calls end UNAVAILABLE and
# calls move to another server. Servers let clients ping this often (``server.app``).
PING_INTERVAL_MS = 5_000
PING_TIMEOUT_MS = 5_000
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", PING_INTERVAL_MS),
    ("grpc.keepalive_timeout_ms", PING_TIMEOUT_MS),
    # What gRPC core (1.5x and later) waits for a ping's answer before it closes the
    # connection: a minute unless set, whatever the keepalive timeout says.
    ("grpc.http2.ping_timeout_ms", PING_TIMEOUT_MS),
    # Keep pinging while a call waits on a server that sends nothing (a worker's idle result
    # stream); gRPC stops after two pings without data otherwise.
    ("grpc.http2.max_pings_without_data", 0),
)
_POLICY_OPTIONS = ("grpc.service_config", "grpc.lb_policy_name")
_AUTHORITY_OPTION = "grpc.default_authority"
_SHOWN = 100  # characters of a bad entry quoted in an error
_FAMILY = {"ipv4": "IPv4", "ipv6": "IPv6"}


class TransportError(ValueError):
    """How to reach a server is described wrongly (a server list gRPC cannot dial, a
    certificate without its key, a token over plaintext to another host), or one of its files
    cannot be read."""


@dataclass(frozen=True)
class ServerList:
    """The servers of one ``--server`` value (``parse``): what gRPC dials (``target``), each
    server's ``host:port`` (``addresses``; the target itself for one address or a DNS name),
    whether calls are balanced over several servers (``balanced``: round_robin), and the
    ``authority`` a list's calls carry ("" for gRPC's own)."""

    given: str
    target: str
    addresses: tuple[str, ...]
    balanced: bool = False
    authority: str = ""

    @classmethod
    def parse(cls, given: str) -> ServerList:
        """The servers ``given`` names; ``TransportError`` naming the entry gRPC cannot dial."""
        if given.startswith("dns:") and "," not in given:
            return cls(given, given, (given,), balanced=True)
        if "," not in given:
            return cls(given, given, (given,))
        return _parse_list(given)

    @property
    def hosts(self) -> frozenset[str]:
        """The hosts of the addresses (of one address: the target as given)."""
        if len(self.addresses) == 1:
            return frozenset(self.addresses)
        return frozenset(_split(address)[0] for address in self.addresses)

    def channel_options(self, options: Sequence[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """``options`` with what dialling these servers needs: for several, round_robin
        (unless ``options`` chose a policy), a list's authority and the pings that notice a
        server gone silent (``KEEPALIVE_OPTIONS``), each unless ``options`` set it."""
        chosen = list(options)
        keys = {key for key, _ in chosen}
        if self.balanced and not keys.intersection(_POLICY_OPTIONS):
            chosen.append(("grpc.service_config", ROUND_ROBIN_CONFIG))
        if self.authority and _AUTHORITY_OPTION not in keys:
            chosen.append((_AUTHORITY_OPTION, self.authority))
        if self.balanced:
            chosen.extend(option for option in KEEPALIVE_OPTIONS if option[0] not in keys)
        return chosen


def _parse_list(given: str) -> ServerList:
    body, scheme = given, ""
    for prefix in ("ipv4:", "ipv6:"):
        if given.startswith(prefix):  # a gRPC static target written out: the same rules
            body, scheme = given.removeprefix(prefix), prefix.rstrip(":")
    entries = [entry.strip() for entry in body.split(",")]
    families: list[str] = []
    for number, entry in enumerate(entries, start=1):
        families.append(_family(entry, number))
        if entry in entries[: number - 1]:
            first = entries.index(entry) + 1
            raise _bad(entry, number, f"repeats entry {first}: name each server once")
        if families[-1] != families[0]:
            raise _bad(
                entry,
                number,
                f"is an {_FAMILY[families[-1]]} address and entry 1 an {_FAMILY[families[0]]} "
                "one: gRPC balances over addresses of one family only; give a DNS name "
                "(dns:///NAME:PORT) that resolves to them all",
            )
    family = families[0]
    if scheme and scheme != family:
        raise TransportError(f"the server list {given[:_SHOWN]!r} is {scheme}: {family} given")
    return ServerList(
        given, f"{family}:{','.join(entries)}", tuple(entries), balanced=True, authority=entries[0]
    )


def _family(entry: str, number: int) -> str:
    """``ipv4`` or ``ipv6``: the family of a list's entry ``host:port``; ``TransportError``
    naming it if it is not one gRPC can put in a list."""
    if not entry:
        raise _bad(entry, number, "is empty: entries are host:port, separated by commas")
    if ":/" in entry or entry.partition(":")[0] in {"dns", "unix", "unix-abstract", "ipv4", "ipv6"}:
        raise _bad(
            entry,
            number,
            "is a gRPC target of its own: a list holds host:port entries only "
            "(a dns:/// name stands alone and resolves to every server itself)",
        )
    host, port = _split(entry)
    if not port:
        raise _bad(entry, number, "has no port: give host:port")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise _bad(entry, number, f"has port {port[:_SHOWN]!r}: a port is 1 to 65535")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise _bad(
            entry,
            number,
            "names a host: a list holds IP addresses (gRPC balances over "
            "names only through DNS): give each server's address, or one dns:///NAME:PORT "
            "that resolves to them all",
        ) from None
    if ip.version == 6 and not entry.startswith("["):
        raise _bad(entry, number, "is an IPv6 address without brackets: give [address]:port")
    return f"ipv{ip.version}"


def _split(entry: str) -> tuple[str, str]:
    """``(host, port)`` of ``host:port`` or ``[v6]:port`` (port "" if there is none)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    host, sep, port = entry.rpartition(":")
    return (host, port) if sep else (entry, "")


def _bad(entry: str, number: int, why: str) -> TransportError:
    return TransportError(f"server list entry {number} {entry[:_SHOWN]!r} {why}")
