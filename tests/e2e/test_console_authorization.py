"""The console's authorization matrix against a real ``tikk dev --auth``: every console route
(and each verb of a route that carries several), for every kind of login, in its own namespace
and another, each request sent as a signed-in browser sends it.

The expectations are generated from the API's policy table (``server.auth.policy.POLICY``)
and the route table (``server.web.console.access.ROUTES``): a route is allowed exactly when
the gRPC method it stands for would be, for the same credential on the same namespace. An
allowed request may still fail (a task that does not exist is 404); a refused one is 403. A
worker credential opens no session, so every route sends it to the login page.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from server.auth.policy import POLICY
from server.web.console.access import ROUTES, SESSION
from tests.e2e.auth_stack import AuthStack, Token
from tests.e2e.console_rig import ConsoleHttp, Dev
from tikk.credentials import Credential, Grant, Role

pytestmark = pytest.mark.e2e

OWN, OTHER = "team-own", "team-other"
GRANTS = {
    "reader": f"read:{OWN}",
    "writer": f"write:{OWN}",
    "admin": f"admin:{OWN}",
    "other-namespace": f"admin:{OTHER}",
    "operator": "admin:*",
    "worker": "worker:*",
}
# What a route's placeholders are filled with: names that do not exist, so an allowed action
# finds nothing to change.
_PLACES = {"task_id": "no-such-task", "sid": "no-such-schedule", "action_id": "no-such-action"}


@dataclass(frozen=True)
class Case:
    """One request: a route's method and path, the verb it carries, the RPC it stands for."""

    method: str
    pattern: str
    verb: str
    rpc: str

    def path(self, namespace: str) -> str:
        values = {**_PLACES, "ns": namespace, "verb": self.verb}
        path = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], self.pattern)
        if self.verb and "{verb}" not in self.pattern and self.method == "GET":
            path += f"?verb={self.verb}"
        return path

    def form(self) -> dict[str, str]:
        if self.verb and "{verb}" not in self.pattern and self.method == "POST":
            return {"verb": self.verb, "action_id": "console-matrix"}
        return {}

    def __str__(self) -> str:
        return f"{self.method} {self.pattern}{f' [{self.verb}]' if self.verb else ''}"


LOGOUT = "/console/logout"


def cases() -> list[Case]:
    """Every route of the console and each of its verbs but signing out, which ends the
    session the others are sent in (``test_signing_out_ends_the_session``)."""
    return [
        Case(method, pattern, verb, rpc)
        for (method, pattern), verbs in ROUTES.items()
        for verb, rpc in verbs.items()
        if pattern != LOGOUT
    ]


class _AnyRequest(SimpleNamespace):
    """Stands for the request of any method naming ``namespace`` wherever a rule's scopes
    read it (its own field, its filter's, its schedule's, its tasks')."""

    def __init__(self, namespace: str) -> None:
        named = SimpleNamespace(namespace=namespace)
        super().__init__(namespace=namespace, filter=named, schedule=named, tasks=[named])

    def WhichOneof(self, group: str) -> str:  # protobuf's name
        return "schedule"


def _credential(grant: str) -> Credential:
    return Credential("0" * 32, "c", b"s", b"h", (Grant.parse(grant),), 0)


def expected_refused(who: str, case: Case, namespace: str) -> bool:
    """What the API's table says: refused unless the login's grant holds the method's role on
    every scope its rule reads from a request naming ``namespace``."""
    credential = _credential(GRANTS[who])
    if case.rpc == SESSION:
        return False
    rule = POLICY[case.rpc]
    assert rule.role is not None
    scopes: Iterable[str] = list(rule.scopes(_AnyRequest(namespace)))
    if not scopes:
        return not credential.allows_somewhere(rule.role)
    return not all(credential.allows(rule.role, scope) for scope in scopes)


@dataclass
class Matrix:
    dev: Dev
    tokens: dict[str, Token]

    def browser(self, who: str) -> ConsoleHttp:
        """A browser that has tried to sign in as ``who`` (a worker is refused)."""
        browser = ConsoleHttp(self.dev.base)
        browser.login(self.tokens[who])
        return browser


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    data = tmp_path_factory.mktemp("console-matrix")
    stack = AuthStack(data)
    tokens: dict[str, Token] = {who: stack.create(who, g)[1] for who, g in GRANTS.items()}
    dev = Dev(data, "--auth")
    try:
        yield Matrix(dev, tokens)
    finally:
        dev.process.stop()


def test_the_matrix_holds_routes_of_every_role_and_logins_of_every_role() -> None:
    needs = {POLICY[c.rpc].role for c in cases() if c.rpc != SESSION}
    assert needs == {Role.READ, Role.WRITE, Role.ADMIN}
    assert {Grant.parse(g).role for g in GRANTS.values()} == set(Role)
    assert {(m, p) for m, p in ROUTES} == {(c.method, c.pattern) for c in cases()} | {
        ("POST", LOGOUT)
    }


def test_signing_out_ends_the_session(matrix: Matrix) -> None:
    browser = matrix.browser("reader")
    assert browser.get("/console/").status == 200
    assert browser.post(LOGOUT, {"csrf": "forged"}).status == 403
    assert browser.get("/console/").status == 200
    assert browser.post(LOGOUT).location == "/console/login"
    assert browser.get("/console/").location == "/console/login"


@pytest.mark.parametrize("who", [w for w in GRANTS if w != "worker"])
def test_each_route_answers_each_login_as_the_api_would(matrix: Matrix, who: str) -> None:
    browser = matrix.browser(who)
    browser.get("/console/")  # the session's CSRF token
    wrong = []
    for case in cases():
        for namespace in (OWN, OTHER):
            answer = _send(browser, case, namespace)
            refused = answer.status == 403
            to_login = answer.status == 303 and answer.location == "/console/login"
            want = expected_refused(who, case, namespace)
            if refused != want or to_login:
                expected = "refused" if want else "allowed"
                got = f"{answer.status} {answer.location}{_said(answer.body)}"
                wrong.append(f"{case} in {namespace}: {got}, expected {expected}")
    assert not wrong, f"{who} ({GRANTS[who]}):\n" + "\n".join(wrong)


def test_a_refusal_names_the_role_and_namespace_as_the_api_does(matrix: Matrix) -> None:
    browser = matrix.browser("writer")
    browser.get("/console/")
    answer = browser.post(f"/console/ns/{OWN}/tasks/no-such-task/purge")
    assert answer.status == 403
    assert f"role admin on namespace '{OWN}' is not granted" in _said(answer.body)


def test_a_worker_login_reaches_no_route(matrix: Matrix) -> None:
    browser = matrix.browser("worker")
    assert "tikk_session" not in browser.cookies
    reached = [str(c) for c in cases() if _send(browser, c, OWN).location != "/console/login"]
    assert not reached


def _send(browser: ConsoleHttp, case: Case, namespace: str) -> Any:
    if case.method == "GET":
        return browser.get(case.path(namespace))
    return browser.post(case.path(namespace), case.form())


def _said(body: str) -> str:
    found = re.search(r'<p class="error">(.*?)</p>', body)
    return f" {html.unescape(found.group(1))!r}" if found else ""
