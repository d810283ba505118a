"""What keeps a browser from being turned against a server's HTTP listener: the hosts it
answers, the origins it takes a state-changing request from, and the headers of every answer.

- **Host.** A console without ``--auth`` holds no secret a page must know, so a page of
  another site whose name is made to resolve to 127.0.0.1 (DNS rebinding) could read it and
  act in it. The listener therefore answers only a ``Host`` that names the address the
  connection came to (the listen host, the socket's own address, or ``localhost``) on the
  port it came to, or one of ``--http-allowed-hosts`` (a proxy's name, with or without a
  port); any other is 421 Misdirected Request, before a page or a session is made. With
  ``--auth`` the check applies only when ``--http-allowed-hosts`` is given: every page
  needs a login there, and a balancer's or ingress's name is not known in advance.
- **Origin.** A POST (every action, the login, the logout) whose ``Origin`` names another
  site, or ``null``, is refused (403), whatever its CSRF token: an origin is same-site when
  it names the request's own ``Host`` with the listener's scheme, or an allowed host. A
  request without ``Origin`` (not a browser's) is left to the CSRF token.
- **Headers.** Every answer says: not to be stored (``Cache-Control: no-store``: pages
  show payloads and tracebacks), no referrer to other sites, no sniffing, never framed,
  scripts and styles only from the console, and under TLS, HTTPS only (HSTS).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp import web

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    # Not "no-referrer": under it a browser sends "Origin: null" with the console's own forms.
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'self'"
    ),
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
HSTS = "max-age=31536000"


@dataclass(frozen=True)
class HostRules:
    """Which hosts and origins a listener answers (see the module).

    ``listen_host`` is the host of ``--http`` (empty or a wildcard: any address the socket
    has); ``allowed`` the ``--http-allowed-hosts`` entries, ``name`` or ``name:port``;
    ``check_host`` whether the Host header is checked at all; ``tls`` whether the listener
    serves HTTPS."""

    listen_host: str
    allowed: frozenset[str]
    check_host: bool
    tls: bool

    @classmethod
    def of(cls, listen: str, allowed: Iterable[str], *, auth: bool, tls: bool) -> HostRules:
        """The rules of a listener on ``listen`` (``HOST:PORT``)."""
        host = listen.rpartition(":")[0].strip("[]").lower()
        entries = frozenset(a.strip().lower() for a in allowed if a.strip())
        return cls(host, entries, check_host=not auth or bool(entries), tls=tls)

    def host_allowed(self, host: str, local: tuple[str, int]) -> bool:
        """Whether a ``Host`` header of ``host`` may be answered on a connection to the
        socket address ``local`` (ip, port)."""
        if not self.check_host:
            return True
        name, port = split_host(host, 443 if self.tls else 80)
        if name is None:
            return False
        if name in self.allowed or f"{_shown(name)}:{port}" in self.allowed:
            return True
        ours = {"localhost", local[0].lower(), self.listen_host} - {"", "0.0.0.0", "::"}
        return port == local[1] and name in ours

    def origin_allowed(self, origin: str | None, host: str) -> bool:
        """Whether a state-changing request from ``origin`` (its ``Origin`` header, None when
        absent) to ``host`` (its ``Host`` header) is same-site."""
        if origin is None:
            return True
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False  # "null" among them: a sandboxed or opaque origin
        name, port = split_host(parts.netloc, 443 if parts.scheme == "https" else 80)
        if name is None:
            return False
        if name in self.allowed or f"{_shown(name)}:{port}" in self.allowed:
            return True
        own = split_host(host, 443 if self.tls else 80)
        return parts.scheme == ("https" if self.tls else "http") and (name, port) == own


def split_host(text: str, default_port: int) -> tuple[str | None, int]:
    """``host[:port]`` (an IPv6 address in brackets) as (lower-case name, port); name None
    when ``text`` is not one."""
    text = text.strip().lower()
    if text.startswith("["):
        address, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else "x")
        name: str | None = address if _is_ip(address) else None
    else:
        address, colon, port_text = text.partition(":")
        name = address or None
        if colon and not port_text:
            port_text = "x"
    if not port_text:
        return name, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65_536:
        return None, default_port
    return name, int(port_text)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _shown(name: str) -> str:
    """``name`` as it is written before a port (an IPv6 address in brackets)."""
    return f"[{name}]" if ":" in name else name


def guard(app: web.Application, rules: HostRules) -> None:
    """Check every request of ``app`` against ``rules`` and give every answer the security
    headers (call before the app starts)."""

    @web.middleware
    async def checked(request: web.Request, handler: _Handler) -> web.StreamResponse:
        host = request.headers.get("Host", "")
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        local = (str(sockname[0]), int(sockname[1])) if sockname else ("", 0)
        if not rules.host_allowed(host, local):
            raise web.HTTPMisdirectedRequest(
                text=f"this server does not answer for host {host[:100]!r}: open it by the "
                "address it listens on, or name the host with --http-allowed-hosts\n"
            )
        if request.method not in _SAFE_METHODS and not rules.origin_allowed(
            request.headers.get("Origin"), host
        ):
            raise web.HTTPForbidden(text="a request from another site is refused\n")
        return await handler(request)

    async def headers(request: web.Request, response: web.StreamResponse) -> None:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if rules.tls:
            response.headers.setdefault("Strict-Transport-Security", HSTS)

    app.middlewares.append(checked)
    app.on_response_prepare.append(headers)
