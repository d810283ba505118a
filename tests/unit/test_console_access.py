"""The console's route table against the routes it registers, and the browser guard's
rules: which Host headers and origins a listener answers."""

from __future__ import annotations

from typing import Any, cast

import pytest
from aiohttp import web

from server.auth.policy import POLICY
from server.web.browser_guard import HostRules, split_host
from server.web.console.access import ROUTES, SESSION, check, request_of, rpc_of
from server.web.console.routes import Console
from server.web.console.sessions import ConsoleSessions
from tikk.clock import ManualClock
from tikk.credentials import Credential, Grant
from tikk.errors import NotFound, PermissionDenied

# Routes any browser reaches: the login form, its post, the stylesheet and script, "/".
_OPEN = {("GET", "/"), ("GET", "/console/login"), ("POST", "/console/login")}


def registered() -> set[tuple[str, str]]:
    app = web.Application()
    console = Console(
        cast(Any, None), ConsoleSessions(None), cast(Any, None), ManualClock(0), secure_cookie=False
    )
    console.add_routes(app)
    found = set()
    for route in app.router.routes():
        resource = route.resource
        assert resource is not None
        if route.method != "HEAD" and not resource.canonical.startswith("/console/static"):
            found.add((route.method, resource.canonical))
    return found - _OPEN


def test_every_registered_route_has_a_row_and_every_row_a_route() -> None:
    assert registered() == set(ROUTES)


def test_every_rpc_named_is_a_method_of_the_policy() -> None:
    named = {rpc for verbs in ROUTES.values() for rpc in verbs.values()} - {SESSION}
    assert named <= set(POLICY)
    for rpc in named:  # each has a request the rule can read a namespace from
        assert request_of(rpc, "ns") is not None


def test_a_route_without_a_row_is_refused_and_an_unknown_verb_not_found() -> None:
    with pytest.raises(PermissionDenied):
        rpc_of("POST", "/console/ns/{ns}/drop-everything", "")
    with pytest.raises(NotFound, match="cancel, stop, redrive, purge"):
        rpc_of("POST", "/console/ns/{ns}/tasks/{task_id}/{verb}", "explode")


def _credential(*grants: str) -> Credential:
    return Credential("0" * 32, "c", b"s", b"h", tuple(Grant.parse(g) for g in grants), 0)


def test_the_check_is_the_apis_rule_on_the_routes_namespace() -> None:
    writer = _credential("write:a")
    redrive = rpc_of("POST", "/console/ns/{ns}/tasks/{task_id}/{verb}", "redrive")
    with pytest.raises(PermissionDenied, match="role admin on namespace 'a' is not granted"):
        check(writer, redrive, "a")
    check(writer, rpc_of("POST", "/console/ns/{ns}/tasks/{task_id}/{verb}", "cancel"), "a")
    with pytest.raises(PermissionDenied, match="every namespace"):
        check(_credential("read:a"), rpc_of("GET", "/console/api/overview", ""), "")
    check(_credential("read:*"), rpc_of("GET", "/console/api/overview", ""), "")
    bulk_purge = rpc_of("POST", "/console/ns/{ns}/bulk", "purge")
    check(_credential("admin:a"), bulk_purge, "a")
    with pytest.raises(PermissionDenied):
        check(_credential("admin:a"), bulk_purge, "b")


@pytest.mark.parametrize(
    ("text", "name", "port"),
    [
        ("127.0.0.1:8080", "127.0.0.1", 8080),
        ("LocalHost:8080", "localhost", 8080),
        ("example.com", "example.com", 80),
        ("[::1]:9", "::1", 9),
        ("[::1]", "::1", 80),
        ("[not-an-ip]:9", None, 9),
        ("example.com:", None, 80),
        ("example.com:99999", None, 80),
        ("example.com:8x", None, 80),
        ("", None, 80),
    ],
)
def test_host_headers_are_split_into_name_and_port(text: str, name: str | None, port: int) -> None:
    assert split_host(text, 80) == (name, port)


LOCAL = ("127.0.0.1", 8080)


def test_without_auth_only_the_listeners_own_names_are_answered() -> None:
    rules = HostRules.of(
        "127.0.0.1:0", ["proxy.example", "other.example:8443"], auth=False, tls=False
    )
    for host in (
        "127.0.0.1:8080",
        "localhost:8080",
        "proxy.example",
        "PROXY.example:1",
        "other.example:8443",
    ):
        assert rules.host_allowed(host, LOCAL), host
    for host in (
        "attacker.example:8080",
        "localhost:8081",
        "127.0.0.1",
        "other.example:8080",
        "",
        "127.0.0.1:8080.evil",
        "localhost.attacker.example:8080",
    ):
        assert not rules.host_allowed(host, LOCAL), host


def test_with_auth_the_host_is_checked_only_when_hosts_are_named() -> None:
    assert HostRules.of("0.0.0.0:0", [], auth=True, tls=True).host_allowed("any.example", LOCAL)
    named = HostRules.of("0.0.0.0:0", ["tikk.example"], auth=True, tls=True)
    assert named.host_allowed("tikk.example", LOCAL)
    assert not named.host_allowed("any.example", LOCAL)


def test_an_origin_is_same_site_only_with_the_requests_own_host_and_scheme() -> None:
    plain = HostRules.of("127.0.0.1:0", ["proxy.example"], auth=False, tls=False)
    assert plain.origin_allowed(None, "127.0.0.1:8080")  # not a browser: the CSRF token decides
    assert plain.origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert plain.origin_allowed("https://proxy.example", "127.0.0.1:8080")
    for origin in (
        "null",
        "http://attacker.example",
        "https://127.0.0.1:8080",
        "http://127.0.0.1:8081",
        "file://",
        "http://127.0.0.1:8080.attacker",
    ):
        assert not plain.origin_allowed(origin, "127.0.0.1:8080"), origin
    tls = HostRules.of("127.0.0.1:0", [], auth=True, tls=True)
    assert tls.origin_allowed("https://tikk.example", "tikk.example:443")
    assert not tls.origin_allowed("http://tikk.example", "tikk.example")
