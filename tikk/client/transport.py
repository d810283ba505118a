"""How a client reaches a tikk server: plaintext or TLS, an optional client certificate (mTLS)
and an optional bearer token. One ``Transport`` opens blocking and asyncio channels alike, so
the CLI, the Python client, the worker SDK and the benchmarks connect the same way::

    transport = Transport(ca_file="ca.pem", token=os.environ["TIKK_TOKEN"])
    with Client("tikk.example:7070", transport=transport) as tikk: ...

A target names one server or several (``tikk.client.server_list``: ``host:port``, a
comma-separated list of addresses, ``dns:///name:port``); with several, calls are balanced
over them (round_robin). The token travels in the metadata of every call as
``authorization: Bearer <token>``. It is added by a client interceptor rather than gRPC call
credentials, because those refuse plaintext channels and the embedded server on loopback
serves plaintext. A token is never sent in clear to anything but a loopback address: a
transport refuses to open a channel to a list of servers with one address that is not.

Files are read when a channel opens; a file that cannot be read raises ``TransportError``
naming the file (never its content). grpc only: the worker SDK imports this module.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from tikk.client.server_list import ServerList, TransportError

# The interceptor bases are generic in the type stubs only.
if TYPE_CHECKING:
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.UnaryStreamClientInterceptor[Any, Any]
    _StreamUnary = grpc.StreamUnaryClientInterceptor[Any, Any]
    _StreamStream = grpc.StreamStreamClientInterceptor[Any, Any]
    _AioUnaryUnary = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _AioUnaryStream = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
    _AioStreamUnary = grpc.aio.StreamUnaryClientInterceptor[Any, Any]
    _AioStreamStream = grpc.aio.StreamStreamClientInterceptor[Any, Any]
else:
    _UnaryUnary = grpc.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.UnaryStreamClientInterceptor
    _StreamUnary = grpc.StreamUnaryClientInterceptor
    _StreamStream = grpc.StreamStreamClientInterceptor
    _AioUnaryUnary = grpc.aio.UnaryUnaryClientInterceptor
    _AioUnaryStream = grpc.aio.UnaryStreamClientInterceptor
    _AioStreamUnary = grpc.aio.StreamUnaryClientInterceptor
    _AioStreamStream = grpc.aio.StreamStreamClientInterceptor

# TransportError is defined with the server list (a list gRPC cannot dial is its first
# cause), and is this module's too.
__all__ = [
    "AUTHORIZATION",
    "Transport",
    "TransportError",
    "dial",
    "dial_aio",
    "is_loopback_address",
    "sendable_token",
]
AUTHORIZATION = "authorization"
_LOOPBACK_NAMES = {"localhost", "localhost.", "ip6-localhost"}


def is_loopback_address(address: str) -> bool:
    """Whether ``address`` (``host:port``, ``[v6]:port``, a gRPC target such as
    ``ipv4:host:port`` or ``unix:path``) reaches only this machine. An empty host (all
    interfaces) is not loopback, nor is any name but ``localhost``."""
    scheme, sep, rest = address.partition(":")
    if sep and scheme in {"unix", "unix-abstract"}:
        return True
    if sep and scheme in {"dns", "ipv4", "ipv6"}:
        address = rest.removeprefix("///")
    host = _host_of(address)
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_of(address: str) -> str:
    if address.startswith("["):
        return address[1:].partition("]")[0]
    host, sep, port = address.rpartition(":")
    if not sep:
        return address
    # An IPv6 address without brackets has colons of its own: with a last group that is not
    # a port number it is all host; "::1" reads as port 1 of "::", which errs on the safe side.
    return address if ":" in host and not port.isdigit() else host


@dataclass(frozen=True)
class Transport:
    """How to reach a server. The default is plaintext with no credential (the embedded
    server on loopback).

    ``tls`` turns TLS on with the system's trusted roots; ``ca_file`` (PEM) trusts that CA
    instead and implies TLS; ``cert_file`` and ``key_file`` (PEM, together) present a client
    certificate (mTLS) and imply TLS. ``server_name`` checks the server's certificate for that
    name instead of the target's host (a server reached by an address its certificate does not
    name). ``token`` is a bearer token sent with every call; it is never printed by ``repr``.
    """

    tls: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise TransportError("a client certificate and its key go together")
        if self.token:
            # Refused now, naming the problem: gRPC would refuse the header only at the
            # first call, as INTERNAL "Invalid metadata".
            sendable_token(self.token, "the transport's token")

    @property
    def secure(self) -> bool:
        """Whether channels are TLS."""
        return self.tls or bool(self.ca_file or self.cert_file)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """The TLS credentials of a channel (files read now), or None for plaintext."""
        if not self.secure:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file, "CA certificate") if self.ca_file else None,
            private_key=_read(self.key_file, "client key") if self.key_file else None,
            certificate_chain=_read(self.cert_file, "client certificate")
            if self.cert_file
            else None,
        )

    def channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A blocking channel to the server or servers ``target`` names."""
        servers, options = self._prepare(target, options)
        channel = dial(servers, self.credentials(), options)
        if not self.token:
            return channel
        return grpc.intercept_channel(channel, _BearerToken(self.token))

    def aio_channel(self, target: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
        """An asyncio channel to the server or servers ``target`` names; open it inside the
        event loop that uses it."""
        servers, options = self._prepare(target, options)
        interceptors = list(_aio_token_interceptors(self.token)) if self.token else None
        return dial_aio(servers, self.credentials(), options, interceptors)

    def _prepare(
        self, target: str, options: Sequence[tuple[str, Any]]
    ) -> tuple[ServerList, list[tuple[str, Any]]]:
        """The servers of ``target``, checked against this transport's rules (a token in
        clear only to loopback, every server of a list; one TLS name for a list), and the
        channel's options with this transport's (the servers add theirs when dialled)."""
        servers = ServerList.parse(target)
        in_clear = self.token and not self.secure
        for address in servers.addresses if in_clear else ():
            if not is_loopback_address(address):
                raise TransportError(
                    f"a token is sent over TLS only (or to a loopback address); {address} is "
                    "neither: give a CA (--tls-ca) or --tls"
                )
        if self.secure and not self.server_name and len(servers.hosts) > 1:
            raise TransportError(
                f"the servers of {target} are checked against one name over TLS, and they are "
                "on different hosts: give the name their certificates share (--tls-server-name)"
            )
        options = list(options)
        if self.server_name and self.secure:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        return servers, options


def dial(
    servers: ServerList,
    credentials: grpc.ChannelCredentials | None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A blocking channel to ``servers``: plaintext, or over ``credentials``."""
    chosen = servers.channel_options(options)
    if credentials is None:
        return grpc.insecure_channel(servers.target, options=chosen)
    return grpc.secure_channel(servers.target, credentials, options=chosen)


def dial_aio(
    servers: ServerList,
    credentials: grpc.ChannelCredentials | None,
    options: Sequence[tuple[str, Any]] = (),
    interceptors: Sequence[Any] | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to ``servers``: plaintext, or over ``credentials``."""
    chosen = servers.channel_options(options)
    if credentials is None:
        return grpc.aio.insecure_channel(servers.target, options=chosen, interceptors=interceptors)
    return grpc.aio.secure_channel(
        servers.target, credentials, options=chosen, interceptors=interceptors
    )


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TransportError(f"cannot read the {what} {path}: {exc.strerror}") from None


def _with_token(metadata: Any, token: str) -> list[tuple[str, str | bytes]]:
    """The call's metadata with the token in place of any ``authorization`` entry."""
    kept = [(key, value) for key, value in (metadata or ()) if key != AUTHORIZATION]
    return [*kept, (AUTHORIZATION, f"Bearer {token}")]


@dataclass(frozen=True)
class _SyncCallDetails(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: Any
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class _BearerToken(
    _UnaryUnary,
    _UnaryStream,
    _StreamUnary,
    _StreamStream,
):
    """Adds ``authorization: Bearer <token>`` to every call of a blocking channel."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "_BearerToken(...)"

    def _details(self, details: Any) -> _SyncCallDetails:
        return _SyncCallDetails(
            details.method,
            details.timeout,
            _with_token(details.metadata, self._token),
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


def _aio_details(details: grpc.aio.ClientCallDetails, token: str) -> grpc.aio.ClientCallDetails:
    return grpc.aio.ClientCallDetails(
        details.method,
        details.timeout,
        grpc.aio.Metadata(*_with_token(details.metadata, token)),
        details.credentials,
        details.wait_for_ready,
    )


class _AioUnaryUnaryToken(_AioUnaryUnary):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_aio_details(details, self._token), request)


class _AioUnaryStreamToken(_AioUnaryStream):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_aio_details(details, self._token), request)


class _AioStreamUnaryToken(_AioStreamUnary):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_aio_details(details, self._token), requests)


class _AioStreamStreamToken(_AioStreamStream):
    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_aio_details(details, self._token), requests)


def _aio_token_interceptors(token: str) -> tuple[Any, ...]:
    """grpc.aio takes one interceptor object per kind of call."""
    return (
        _AioUnaryUnaryToken(token),
        _AioUnaryStreamToken(token),
        _AioStreamUnaryToken(token),
        _AioStreamStreamToken(token),
    )


def sendable_token(token: str, source: str) -> str:
    """``token``, if it can travel in an ``authorization`` header: one line of printable
    ASCII without spaces (as every tikk token is). Else ``TransportError`` saying what is
    wrong and where (``source``), never showing the token."""
    lines = len(token.splitlines())
    if lines > 1:
        raise TransportError(
            f"{source} holds {lines} lines of text; a token is one line (the file holds the "
            "token alone)"
        )
    for position, char in enumerate(token, start=1):
        if not "!" <= char <= "~":
            what = "a space" if char.isspace() else "a control character"
            what = what if char.isascii() else "not ASCII"
            raise TransportError(
                f"{source}: character {position} of the token is {what}; a token is printable "
                "ASCII only"
            )
    return token
